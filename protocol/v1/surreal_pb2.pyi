# ruff: noqa
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DTYPE_UNSPECIFIED: _ClassVar[DType]
    FLOAT32: _ClassVar[DType]
    FLOAT64: _ClassVar[DType]
    INT32: _ClassVar[DType]
    INT64: _ClassVar[DType]
    UINT8: _ClassVar[DType]
    BOOL: _ClassVar[DType]
DTYPE_UNSPECIFIED: DType
FLOAT32: DType
FLOAT64: DType
INT32: DType
INT64: DType
UINT8: DType
BOOL: DType

class Tensor(_message.Message):
    __slots__ = ("name", "dtype", "shape", "data")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    dtype: DType
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    def __init__(self, name: _Optional[str] = ..., dtype: _Optional[_Union[DType, str]] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("worker_id",)
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    def __init__(self, worker_id: _Optional[str] = ...) -> None: ...

class Fragment(_message.Message):
    __slots__ = ("policy_version", "tensors", "span_ms", "waited_ms")
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    SPAN_MS_FIELD_NUMBER: _ClassVar[int]
    WAITED_MS_FIELD_NUMBER: _ClassVar[int]
    policy_version: int
    tensors: _containers.RepeatedCompositeFieldContainer[Tensor]
    span_ms: int
    waited_ms: int
    def __init__(self, policy_version: _Optional[int] = ..., tensors: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ..., span_ms: _Optional[int] = ..., waited_ms: _Optional[int] = ...) -> None: ...

class ExperienceRequest(_message.Message):
    __slots__ = ("hello", "fragment")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    FRAGMENT_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    fragment: Fragment
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., fragment: _Optional[_Union[Fragment, _Mapping]] = ...) -> None: ...

class Credit(_message.Message):
    __slots__ = ("credits", "latest_version")
    CREDITS_FIELD_NUMBER: _ClassVar[int]
    LATEST_VERSION_FIELD_NUMBER: _ClassVar[int]
    credits: int
    latest_version: int
    def __init__(self, credits: _Optional[int] = ..., latest_version: _Optional[int] = ...) -> None: ...

class GetParams(_message.Message):
    __slots__ = ("known_version", "role")
    KNOWN_VERSION_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    known_version: int
    role: str
    def __init__(self, known_version: _Optional[int] = ..., role: _Optional[str] = ...) -> None: ...

class Params(_message.Message):
    __slots__ = ("version", "unchanged", "weights", "extras")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    EXTRAS_FIELD_NUMBER: _ClassVar[int]
    version: int
    unchanged: bool
    weights: _containers.RepeatedCompositeFieldContainer[Tensor]
    extras: _containers.RepeatedCompositeFieldContainer[Tensor]
    def __init__(self, version: _Optional[int] = ..., unchanged: _Optional[bool] = ..., weights: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ..., extras: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("json",)
    JSON_FIELD_NUMBER: _ClassVar[int]
    json: str
    def __init__(self, json: _Optional[str] = ...) -> None: ...

class EvalReport(_message.Message):
    __slots__ = ("policy_version", "env_steps", "mean_return", "std_return", "episodes", "mean_length")
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    ENV_STEPS_FIELD_NUMBER: _ClassVar[int]
    MEAN_RETURN_FIELD_NUMBER: _ClassVar[int]
    STD_RETURN_FIELD_NUMBER: _ClassVar[int]
    EPISODES_FIELD_NUMBER: _ClassVar[int]
    MEAN_LENGTH_FIELD_NUMBER: _ClassVar[int]
    policy_version: int
    env_steps: int
    mean_return: float
    std_return: float
    episodes: int
    mean_length: float
    def __init__(self, policy_version: _Optional[int] = ..., env_steps: _Optional[int] = ..., mean_return: _Optional[float] = ..., std_return: _Optional[float] = ..., episodes: _Optional[int] = ..., mean_length: _Optional[float] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SampleRequest(_message.Message):
    __slots__ = ("rows", "wait_ms")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    rows: int
    wait_ms: int
    def __init__(self, rows: _Optional[int] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class ReplayState(_message.Message):
    __slots__ = ("size", "inserted", "sampled", "restored", "lost", "refused", "malformed", "unauthenticated", "undecodable", "too_many_streams", "bad_samples", "actor_span_ms", "actor_waited_ms")
    SIZE_FIELD_NUMBER: _ClassVar[int]
    INSERTED_FIELD_NUMBER: _ClassVar[int]
    SAMPLED_FIELD_NUMBER: _ClassVar[int]
    RESTORED_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    MALFORMED_FIELD_NUMBER: _ClassVar[int]
    UNAUTHENTICATED_FIELD_NUMBER: _ClassVar[int]
    UNDECODABLE_FIELD_NUMBER: _ClassVar[int]
    TOO_MANY_STREAMS_FIELD_NUMBER: _ClassVar[int]
    BAD_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    ACTOR_SPAN_MS_FIELD_NUMBER: _ClassVar[int]
    ACTOR_WAITED_MS_FIELD_NUMBER: _ClassVar[int]
    size: int
    inserted: int
    sampled: int
    restored: int
    lost: int
    refused: int
    malformed: int
    unauthenticated: int
    undecodable: int
    too_many_streams: int
    bad_samples: int
    actor_span_ms: int
    actor_waited_ms: int
    def __init__(self, size: _Optional[int] = ..., inserted: _Optional[int] = ..., sampled: _Optional[int] = ..., restored: _Optional[int] = ..., lost: _Optional[int] = ..., refused: _Optional[int] = ..., malformed: _Optional[int] = ..., unauthenticated: _Optional[int] = ..., undecodable: _Optional[int] = ..., too_many_streams: _Optional[int] = ..., bad_samples: _Optional[int] = ..., actor_span_ms: _Optional[int] = ..., actor_waited_ms: _Optional[int] = ...) -> None: ...

class Sampled(_message.Message):
    __slots__ = ("ready", "tensors", "state", "episode_returns")
    READY_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EPISODE_RETURNS_FIELD_NUMBER: _ClassVar[int]
    ready: bool
    tensors: _containers.RepeatedCompositeFieldContainer[Tensor]
    state: ReplayState
    episode_returns: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, ready: _Optional[bool] = ..., tensors: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ..., state: _Optional[_Union[ReplayState, _Mapping]] = ..., episode_returns: _Optional[_Iterable[float]] = ...) -> None: ...

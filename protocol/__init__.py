"""Wire protocol: tensors, experience up, parameters down, status and health on the side.

The only layer that imports grpc. See docs in each module; the proto is `v1/surreal.proto`.
"""

from surreal.protocol.client import ExperienceStream, LearnerClient, ProtocolError
from surreal.protocol.codec import CodecError, TensorSpec, decode, decode_map, encode, encode_map
from surreal.protocol.server import LearnerServer
from surreal.protocol.types import EvalReport, Fragment, Params

__all__ = [
    "CodecError",
    "EvalReport",
    "ExperienceStream",
    "Fragment",
    "LearnerClient",
    "LearnerServer",
    "Params",
    "ProtocolError",
    "TensorSpec",
    "decode",
    "decode_map",
    "encode",
    "encode_map",
]

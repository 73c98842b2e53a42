"""Client of the learner (actors: experience up, parameters down; the evaluator) and of a replay
shard (actors insert over its experience stream, the learner samples)."""

from __future__ import annotations

import dataclasses
import json
import queue
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import grpc
import numpy as np
from grpc_health.v1 import health_pb2, health_pb2_grpc

from surreal.protocol.auth import TOKEN_METADATA_KEY
from surreal.protocol.codec import decode_map, encode_map
from surreal.protocol.options import MAX_MESSAGE_BYTES, client_options
from surreal.protocol.types import EvalReport, Params, ReplayState, Sampled
from surreal.protocol.v1 import surreal_pb2 as pb

_EXPERIENCE_SERVICE = pb.DESCRIPTOR.services_by_name["Experience"].full_name
# How long close() waits for queued fragments to reach the learner before cancelling.
_CLOSE_DRAIN_SECONDS = 5.0


class ProtocolError(RuntimeError):
    """A call to the learner failed; `code` is the grpc status code name, e.g. "UNAVAILABLE"."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    @classmethod
    def from_rpc(cls, error: grpc.RpcError) -> ProtocolError:
        # Errors raised by calls are also grpc.Call objects, which carry code and details.
        code = error.code() if isinstance(error, grpc.Call) else None
        details = error.details() if isinstance(error, grpc.Call) else None
        return cls(code.name if code is not None else "UNKNOWN", details or str(error))


class ExperienceStream:
    """One actor worker's experience stream. `send` blocks while the learner owes no credit.

    A background thread reads credits; the grpc call consumes requests from a queue. Meant for
    one sending thread (concurrent senders are safe, but their fragments' order is not defined).
    Each fragment says how long its sender took since the previous one (the first: since the
    stream's opening grant, when the server opened it) and how much of that it waited: for a
    credit, for an acknowledgement, and what `note_wait` adds (the learner's actors' wait share).
    """

    def __init__(self, stream: Any, metadata: tuple, worker_id: str) -> None:
        self.worker_id = worker_id
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._requests.put(pb.ExperienceRequest(hello=pb.Hello(worker_id=worker_id)))
        self._cond = threading.Condition()
        self._credits = 0
        self._opened = False  # the first credit (the stream's opening grant) came
        self._sent = 0  # fragments queued
        self._acked = 0  # credits handed back since the opening grant: fragments the learner took
        self._latest_version: int | None = None
        self._since = time.monotonic()  # the previous fragment's time said (the opening grant's first)
        self._waited = 0.0  # seconds waited and not said yet
        self._error: ProtocolError | None = None
        self._closed = False
        self._call = stream(self._request_iter(), metadata=metadata)
        self._reader = threading.Thread(
            target=self._read_credits, name=f"surreal-credits-{worker_id}", daemon=True
        )
        self._reader.start()

    def _request_iter(self) -> Iterator[pb.ExperienceRequest]:
        while (request := self._requests.get()) is not None:
            yield request

    def _read_credits(self) -> None:
        try:
            for credit in self._call:
                with self._cond:
                    self._credits += credit.credits
                    if self._opened:
                        self._acked += credit.credits
                    else:  # what the stream's fragments say counts from here
                        self._since, self._waited = time.monotonic(), 0.0
                    self._opened = True
                    if credit.HasField("latest_version"):
                        self._latest_version = credit.latest_version
                    self._cond.notify_all()
            error = ProtocolError("UNAVAILABLE", "the learner closed the experience stream")
        except grpc.RpcError as e:
            error = ProtocolError.from_rpc(e)
        with self._cond:
            self._error = error
            self._cond.notify_all()
        self._requests.put(None)  # unblocks grpc's request-consuming thread

    def send(
        self,
        policy_version: int,
        tensors: Mapping[str, np.ndarray],
        timeout: float | None = None,
    ) -> None:
        """Queue one fragment once a credit is available. The arrays are copied before this
        returns. Raises ProtocolError if the stream broke or was closed, TimeoutError if no
        credit came within `timeout` seconds (the stream stays usable)."""
        fragment = pb.Fragment(policy_version=policy_version, tensors=encode_map(tensors))
        asked = time.monotonic()
        with self._cond:
            ready = self._cond.wait_for(
                lambda: self._credits > 0 or self._error is not None or self._closed, timeout
            )
            # A timeout's wait too (the next send says it), but not a wait for the opening grant.
            self._waited += time.monotonic() - max(asked, self._since)
            if self._closed:
                raise ProtocolError("CANCELLED", "the experience stream was closed")
            if self._error is not None:
                raise self._error
            if not ready:
                raise TimeoutError(f"no credit from the learner within {timeout} s")
            self._credits -= 1
            self._sent += 1
            # Whole milliseconds, the rest carried to the next fragment (off-policy actors send one
            # every millisecond or so: rounding each would lose or make up most of the time).
            now = time.monotonic()
            fragment.span_ms = round(1000 * (now - self._since))
            fragment.waited_ms = min(fragment.span_ms, round(1000 * self._waited))
            self._since += fragment.span_ms / 1000
            unsaid = max(0.0, now - self._since)  # a wait carried over is never longer than the span
            self._waited = min(max(0.0, self._waited - fragment.waited_ms / 1000), unsaid)
        self._requests.put(pb.ExperienceRequest(fragment=fragment))

    def note_wait(self, seconds: float) -> None:
        """Count `seconds` the sender waited on the learner's side outside `send` (idle with nothing
        to do): the next fragment says it."""
        with self._cond:
            self._waited += max(0.0, seconds)

    def wait_acknowledged(self, timeout: float) -> bool:
        """Wait until the learner has handed back the credit of every fragment sent so far (from
        a learner that releases credits after dealing with fragments, this means "dealt with").
        Returns False on timeout, or if the stream broke or was closed meanwhile."""
        asked = time.monotonic()
        with self._cond:
            done = self._cond.wait_for(
                lambda: self._acked >= self._sent or self._error is not None or self._closed, timeout
            )
            self._waited += time.monotonic() - asked  # on the learner: the next fragment says it
            return done and self._acked >= self._sent

    @property
    def latest_version(self) -> int | None:
        """The learner's latest policy version as of its last credit, or None when it has not
        said (nothing published yet, or a server that does not say): then ask with get_params."""
        with self._cond:
            return self._latest_version

    @property
    def credits(self) -> int:
        """Credits currently available (fragments that can be sent without blocking)."""
        with self._cond:
            return self._credits

    def close(self) -> None:
        """Half-close (the learner still gets every fragment already sent), wait briefly for
        the learner to end the stream, then cancel. Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        self._requests.put(None)
        self._reader.join(_CLOSE_DRAIN_SECONDS)
        self._call.cancel()
        self._reader.join(_CLOSE_DRAIN_SECONDS)


class LearnerClient:
    """One channel to the learner; get_params, report_eval and status are thread-safe."""

    def __init__(
        self,
        address: str,
        token: str,
        *,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        tls_root: bytes | None = None,
    ) -> None:
        options = client_options(max_message_bytes)
        self.address = address
        if tls_root is None:
            self._channel = grpc.insecure_channel(address, options=options)
        else:
            creds = grpc.ssl_channel_credentials(root_certificates=tls_root)
            self._channel = grpc.secure_channel(address, creds, options=options)
        self._metadata = ((TOKEN_METADATA_KEY, token),)
        self._health = health_pb2_grpc.HealthStub(self._channel)
        self._stream, self._get_params, self._get_status, self._report_eval, self._sample = (
            rpc(self._channel, service, name)
            for service, name in (("Experience", "Stream"), ("Parameters", "Get"), ("Status", "Get"),
                                  ("Status", "ReportEval"), ("Replay", "Sample"))
        )  # fmt: skip
        self._streams: weakref.WeakSet[ExperienceStream] = weakref.WeakSet()

    def wait_ready(self, timeout: float) -> None:
        """Poll the health service until the learner reports SERVING; ProtocolError (code
        UNAVAILABLE) after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        request = health_pb2.HealthCheckRequest(service=_EXPERIENCE_SERVICE)
        last = "no answer"
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ProtocolError("UNAVAILABLE", f"{self.address} not ready after {timeout} s: {last}")
            try:
                reply = self._health.Check(request, timeout=min(left, 1.0), wait_for_ready=True)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
                last = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
            except grpc.RpcError as e:
                last = str(ProtocolError.from_rpc(e))
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

    def get_params(self, known_version: int = -1, timeout: float = 10.0, role: str = "") -> Params | None:
        """The learner's parameters, or None if `known_version` is current or none exist yet.
        The arrays are read-only views of the received message. `role`: who asks ("evaluator"
        for the evaluator, which the learner then knows to be alive; "" for actors)."""
        request = pb.GetParams(known_version=known_version, role=role)
        reply = self._call(self._get_params, request, timeout)
        if reply.unchanged:
            return None
        return Params(
            version=reply.version,
            weights=decode_map(reply.weights),
            extras=decode_map(reply.extras),
        )

    def experience(self, worker_id: str) -> ExperienceStream:
        """Open an experience stream; it is granted its credits once the learner accepts it."""
        stream = ExperienceStream(self._stream, self._metadata, worker_id)
        self._streams.add(stream)
        return stream

    def report_eval(self, report: EvalReport, timeout: float = 10.0) -> None:
        self._call(self._report_eval, pb.EvalReport(**dataclasses.asdict(report)), timeout)

    def sample(self, rows: int, wait: float, timeout: float = 10.0) -> Sampled:
        """`rows` rows from a replay shard, which may wait up to `wait` s for its rate limiter
        (Sampled.rows None: it held them). The arrays are read-only views of the message."""
        request = pb.SampleRequest(rows=rows, wait_ms=round(wait * 1000))
        reply = self._call(self._sample, request, timeout + wait)
        state = ReplayState(**{f: getattr(reply.state, f) for f in ReplayState.__dataclass_fields__})
        return Sampled(
            decode_map(reply.tensors) if reply.ready else None, state, tuple(reply.episode_returns)
        )

    def status(self, timeout: float = 5.0) -> dict:
        """The learner's status dict (what its status_provider returned)."""
        return json.loads(self._call(self._get_status, pb.StatusRequest(), timeout).json)

    def _call(self, method: Any, request: Any, timeout: float) -> Any:
        """One unary call to the learner; its grpc error as a ProtocolError."""
        try:
            return method(request, timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise ProtocolError.from_rpc(e) from None

    def close(self) -> None:
        """Close every open stream, then the channel. Idempotent."""
        for stream in list(self._streams):
            stream.close()
        self._channel.close()


def rpc(channel: grpc.Channel, service: str, name: str) -> Any:
    """The channel's callable for one method of surreal.proto, its messages named by the descriptor
    (the server registers its handlers from the same descriptor: no generated stubs)."""
    method = pb.DESCRIPTOR.services_by_name[service].methods_by_name[name]
    request, reply = getattr(pb, method.input_type.name), getattr(pb, method.output_type.name)
    kind = channel.stream_stream if method.client_streaming else channel.unary_unary
    path = f"/{method.containing_service.full_name}/{name}"
    return kind(path, request_serializer=request.SerializeToString, response_deserializer=reply.FromString,
                _registered_method=True)  # fmt: skip

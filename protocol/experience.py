"""Server side of `surreal.v1.Experience/Stream`: credit-based flow control of actor fragments.

Each stream is granted `credits_per_stream` credits when it opens; a fragment spends one, and the
stream gets it back only when the learner takes that fragment (`next_fragment`). So the fragments
of a stream that wait in the learner's queue never exceed its credits, and a slow learner slows its
actors down instead of growing a queue without bound.

Threads: the grpc handler thread runs the response generator, which waits for credits to grant;
a plain thread per stream reads and validates the fragments. A stream therefore holds one grpc pool
thread for its lifetime, which is why the number of streams is capped (see LearnerServer).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import grpc

from surreal.protocol.codec import CodecError, TensorSpec, decode_map
from surreal.protocol.messages import Undecodable, peer_host, worker_id_problem
from surreal.protocol.ratelimit import RejectionLog
from surreal.protocol.stats import Counters
from surreal.protocol.types import Fragment
from surreal.protocol.v1 import surreal_pb2 as pb

_STOP = object()  # in the fragment queue after shutdown: wakes every next_fragment() waiter


@dataclass(eq=False)
class _Stream:
    worker_id: str
    # Credits granted to the client and not yet spent on a received fragment.
    outstanding: int
    # Credits to send to the client; None means "the stream is over, stop waiting".
    grants: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    # Set by the reader when the client broke the protocol; the handler aborts with it.
    error: tuple[grpc.StatusCode, str] | None = None


class ExperienceService:
    """Holds the learner's fragment queue and serves the experience streams that fill it."""

    def __init__(
        self,
        schema: Mapping[str, TensorSpec],
        credits_per_stream: int,
        max_streams: int,
        counters: Counters,
        rejections: RejectionLog,
    ) -> None:
        self._schema = dict(schema)
        self._rejections = rejections
        self._credits = credits_per_stream
        self._max_streams = max_streams
        self._counters = counters
        self._lock = threading.Lock()
        self._streams: set[_Stream] = set()
        self._fragments: queue.Queue = queue.Queue()
        self._stopping = False

    # ---- learner side

    def next_fragment(self, timeout: float | None) -> Fragment | None:
        try:
            item = self._fragments.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is _STOP:
            self._fragments.put(_STOP)
            return None
        fragment, stream = item
        with self._lock:
            stream.outstanding += 1
        stream.grants.put(1)  # harmless if the stream has ended: nobody reads the queue any more
        self._counters.add("fragments_taken")
        return fragment

    def pending(self) -> int:
        return max(0, self._fragments.qsize() - (1 if self._stopping else 0))

    def shutdown(self) -> None:
        """End every stream with UNAVAILABLE and wake every next_fragment() waiter."""
        with self._lock:
            if self._stopping:
                return
            self._stopping = True
            streams = list(self._streams)
        for stream in streams:
            stream.grants.put(None)
        self._fragments.put(_STOP)
        self._rejections.flush(force=True)

    # ---- grpc handler

    def stream(
        self, request_iterator: Iterator[pb.ExperienceRequest], context: grpc.ServicerContext
    ) -> Iterator[pb.Credit]:
        try:
            first = next(request_iterator)
        except (StopIteration, grpc.RpcError):
            return  # the client went away before saying hello
        if isinstance(first, Undecodable):
            self._reject(context, "undecodable", f"undecodable message: {first.error}")
        if first.WhichOneof("kind") != "hello":
            self._reject(context, "invalid", "first message must be a Hello")
        problem = worker_id_problem(first.hello.worker_id)
        if problem is not None:
            self._reject(context, "invalid", f"bad Hello: {problem}")
        stream = self._open(first.hello.worker_id, context)
        context.add_callback(lambda: stream.grants.put(None))
        threading.Thread(
            target=self._read_fragments,
            args=(request_iterator, stream),
            name=f"surreal-experience-{stream.worker_id}",
            daemon=True,
        ).start()
        try:
            yield pb.Credit(credits=self._credits)
            yield from self._grants(stream)
        finally:
            self._close(stream)
        if stream.error is not None:
            context.abort(*stream.error)
        if self._stopping:
            context.abort(grpc.StatusCode.UNAVAILABLE, "the learner is shutting down")

    def _reject(self, context: grpc.ServicerContext, kind: str, message: str) -> None:
        """Abort a stream that has not said a valid Hello (raises)."""
        self._counters.add(f"rejected_{kind}")
        self._rejections.note(peer_host(context.peer()), kind, message)
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)

    def _open(self, worker_id: str, context: grpc.ServicerContext) -> _Stream:
        with self._lock:
            stopping, full = self._stopping, len(self._streams) >= self._max_streams
            if not (stopping or full):
                stream = _Stream(worker_id, outstanding=self._credits)
                self._streams.add(stream)
        if stopping:
            context.abort(grpc.StatusCode.UNAVAILABLE, "the learner is shutting down")
        if full:
            self._counters.add("rejected_streams")
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"too many experience streams (max {self._max_streams}); raise max_workers",
            )
        self._counters.add("streams_opened")
        self._counters.add("connected_streams")
        return stream

    def _close(self, stream: _Stream) -> None:
        with self._lock:
            self._streams.discard(stream)
        self._counters.add("connected_streams", -1)

    @staticmethod
    def _grants(stream: _Stream) -> Iterator[pb.Credit]:
        """Credits as the learner hands them back, coalesced; returns when the stream is over."""
        while True:
            total = stream.grants.get()
            if total is None:
                return
            while True:
                try:
                    more = stream.grants.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    return
                total += more
            yield pb.Credit(credits=total)

    # ---- reader thread

    def _read_fragments(self, request_iterator: Iterator[pb.ExperienceRequest], stream: _Stream) -> None:
        try:
            for request in request_iterator:
                error = self._accept(request, stream)
                if error is not None:
                    kind = "undecodable" if isinstance(request, Undecodable) else "invalid"
                    self._counters.add(f"rejected_{kind}")
                    self._rejections.note(stream.worker_id, kind, error[1])
                    stream.error = error
                    break
        except grpc.RpcError:
            pass  # the call ended (cancelled, too large, server stopping): nothing left to read
        except Exception as e:
            self._rejections.note(stream.worker_id, "internal", f"{type(e).__name__}: {e}")
            stream.error = (grpc.StatusCode.INTERNAL, "the learner failed to read the stream")
        finally:
            stream.grants.put(None)

    def _accept(self, request: pb.ExperienceRequest, stream: _Stream) -> tuple[grpc.StatusCode, str] | None:
        """Queue one fragment for the learner, or say why the stream must be aborted."""
        if isinstance(request, Undecodable):
            return grpc.StatusCode.INVALID_ARGUMENT, f"undecodable message: {request.error}"
        kind = request.WhichOneof("kind")
        if kind != "fragment":
            return grpc.StatusCode.INVALID_ARGUMENT, f"expected a Fragment, got {kind or 'nothing'}"
        with self._lock:
            if stream.outstanding <= 0:
                return grpc.StatusCode.INVALID_ARGUMENT, "fragment sent without a credit"
            stream.outstanding -= 1
        try:
            tensors = decode_map(request.fragment.tensors, self._schema)
        except CodecError as e:
            return grpc.StatusCode.INVALID_ARGUMENT, f"invalid fragment: {e}"
        fragment = Fragment(stream.worker_id, request.fragment.policy_version, tensors)
        self._fragments.put((fragment, stream))
        self._counters.add("fragments_received")
        return None

"""Server side of `surreal.v1.Experience/Stream`: credit-based flow control of actor fragments.

Each stream is granted `credits_per_stream` credits when it opens; a fragment spends one, and the
stream gets it back only when the learner takes that fragment (`next_fragment`). So the fragments
of a stream that wait in the learner's queue never exceed its credits, and a slow learner slows its
actors down instead of growing a queue without bound. A learner made with `credit_on_take=False`
hands credits back later, when it calls `release()` after dealing with what it took (ES: after the
update those results completed and its publication), so a credit's `latest_version` tells the
actor whether its own results are in the version it can fetch now.

Threads: each stream is a handler that sends credits and a task that reads and checks fragments,
on the server's event loop (server.py); the learner takes fragments from another thread through a
thread-safe queue, and each take hands the stream's credit back to the loop.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field

import grpc

from surreal.protocol.codec import CodecError, TensorSpec, decode_map
from surreal.protocol.messages import Undecodable, peer_host, timing_problem, worker_id_problem
from surreal.protocol.ratelimit import RejectionLog
from surreal.protocol.stats import Counters
from surreal.protocol.types import Fragment
from surreal.protocol.v1 import surreal_pb2 as pb

_STOP = object()  # in the fragment queue after shutdown: wakes every next_fragment() waiter


@dataclass(eq=False)
class _Stream:
    worker_id: str
    # Credits granted to the client and not yet spent on a received fragment (loop thread only).
    outstanding: int
    # Credits to send to the client; None means "the stream is over, stop waiting".
    grants: asyncio.Queue[int | None] = field(default_factory=asyncio.Queue)
    # Set by the reader when the client broke the protocol; the handler aborts with it.
    error: tuple[grpc.StatusCode, str] | None = None
    opened: float = field(default_factory=lambda: time.monotonic())  # when the server opened it
    said_ms: int = 0  # the span its fragments said, summed (Fragment.span_ms)


class ExperienceService:
    """Holds the learner's fragment queue and serves the experience streams that fill it. The
    handler runs on the server's event loop (`loop`); next_fragment() on any other thread."""

    def __init__(
        self,
        schema: Mapping[str, TensorSpec],
        credits_per_stream: int,
        max_streams: int,
        counters: Counters,
        rejections: RejectionLog,
        latest_version: Callable[[], int | None] = lambda: None,
        credit_on_take: bool = True,
    ) -> None:
        self._schema = dict(schema)
        self._credit_on_take = credit_on_take
        self._held: list[_Stream] = []  # taken, credit not yet released (credit_on_take=False)
        self._latest_version = latest_version
        self._rejections = rejections
        self._credits = credits_per_stream
        self._max_streams = max_streams
        self._counters = counters
        self._streams: set[_Stream] = set()  # changed on the loop thread, under _workers_lock
        # when each worker last opened a stream (loop thread writes; any thread reads a copy)
        self._opened_at: dict[str, float] = {}
        self._workers_lock = threading.Lock()
        self._fragments: queue.Queue = queue.Queue()
        self._stopping = threading.Event()
        # Streams whose fragments the learner took, to be granted a credit back on the loop; one
        # wake-up of the loop serves all that pile up meanwhile (a wake-up is a system call).
        self._taken: list[_Stream] = []
        self._taken_lock = threading.Lock()
        self._wakeup_pending = False
        self.loop: asyncio.AbstractEventLoop | None = None  # set by the server before it starts

    # ---- learner side (any thread)

    @property
    def max_streams(self) -> int:
        return self._max_streams

    def set_max_streams(self, max_streams: int) -> None:
        """Accept up to `max_streams` open streams from now on. Lowering it ends no stream: it
        only refuses new ones while as many or more are open. (One attribute, replaced whole: the
        loop reads it once per opening stream, so any thread may call this.)"""
        if isinstance(max_streams, bool) or not isinstance(max_streams, int) or max_streams < 1:
            raise ValueError(f"max_streams must be an integer >= 1, got {max_streams!r}")
        self._max_streams = max_streams

    def workers(self) -> tuple[set[str], dict[str, float]]:
        """(the workers with a stream open now, when each worker last opened one: monotonic)."""
        with self._workers_lock:
            return {s.worker_id for s in self._streams}, dict(self._opened_at)

    def next_fragment(self, timeout: float | None) -> Fragment | None:
        try:
            item = self._fragments.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is _STOP:
            self._fragments.put(_STOP)
            return None
        fragment, stream = item
        self._counters.add("fragments_taken")
        if self._credit_on_take:
            self._grant([stream])
        else:
            with self._taken_lock:
                self._held.append(stream)
        return fragment

    def release(self) -> None:
        """Hand back the credits of every fragment taken since the last call (with
        credit_on_take=False; a no-op otherwise). Call it from the thread that takes fragments."""
        with self._taken_lock:
            held, self._held = self._held, []
        if held:
            self._grant(held)

    def _grant(self, streams: list[_Stream]) -> None:
        with self._taken_lock:
            self._taken.extend(streams)
            wake, self._wakeup_pending = not self._wakeup_pending, True
        if wake:
            self._on_loop(self._grant_taken)

    def pending(self) -> int:
        return max(0, self._fragments.qsize() - (1 if self._stopping.is_set() else 0))

    def shutdown(self) -> None:
        """End every stream with UNAVAILABLE (on the loop) and wake every next_fragment() waiter."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._on_loop(self._end_streams)
        self._fragments.put(_STOP)
        self._rejections.flush(force=True)

    def _on_loop(self, callback: Callable[[], None]) -> None:
        """Run `callback` on the server's loop, if it still runs (else the streams are over anyway)."""
        loop = self.loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(callback)
            except RuntimeError:
                pass  # the loop closed meanwhile

    # ---- loop thread

    def _grant_taken(self) -> None:
        with self._taken_lock:
            taken, self._taken, self._wakeup_pending = self._taken, [], False
        for stream in taken:
            stream.outstanding += 1
            stream.grants.put_nowait(1)  # harmless if the stream has ended: nobody reads it any more

    def _end_streams(self) -> None:
        for stream in list(self._streams):
            stream.grants.put_nowait(None)

    async def stream(
        self, request_iterator: AsyncIterator[pb.ExperienceRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.Credit]:
        try:
            first = await anext(request_iterator)
        except (StopAsyncIteration, grpc.RpcError, asyncio.CancelledError):
            return  # the client went away before saying hello
        if isinstance(first, Undecodable):
            await self._reject(context, "undecodable", f"undecodable message: {first.error}")
        if first.WhichOneof("kind") != "hello":
            await self._reject(context, "invalid", "first message must be a Hello")
        problem = worker_id_problem(first.hello.worker_id)
        if problem is not None:
            await self._reject(context, "invalid", f"bad Hello: {problem}")
        stream = await self._open(first.hello.worker_id, context)
        reader = asyncio.create_task(self._read_fragments(request_iterator, stream))
        try:
            yield self._credit(self._credits)
            while (total := await self._coalesced(stream)) is not None:
                yield self._credit(total)
        finally:
            reader.cancel()
            self._close(stream)
        if stream.error is not None:
            await context.abort(*stream.error)
        if self._stopping.is_set():
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the server is shutting down")

    def _credit(self, credits: int) -> pb.Credit:
        """A grant, with the version an actor would get from Parameters.Get now (so it asks only
        when that changed: one call per fragment fewer)."""
        version = self._latest_version()
        if version is None:
            return pb.Credit(credits=credits)
        return pb.Credit(credits=credits, latest_version=version)

    @staticmethod
    async def _coalesced(stream: _Stream) -> int | None:
        """The credits the learner handed back since the last grant, at least one; None once the
        stream is over."""
        total = await stream.grants.get()
        while total is not None and not stream.grants.empty():
            more = stream.grants.get_nowait()
            total = None if more is None else total + more
        return total

    async def _reject(self, context: grpc.aio.ServicerContext, kind: str, message: str) -> None:
        """Abort a stream that has not said a valid Hello (raises)."""
        self._counters.add(f"rejected_{kind}")
        self._rejections.note(peer_host(context.peer()), kind, message)
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)

    async def _open(self, worker_id: str, context: grpc.aio.ServicerContext) -> _Stream:
        if self._stopping.is_set():
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the server is shutting down")
        cap = self._max_streams  # read once: set_max_streams may replace it from another thread
        if len(self._streams) >= cap:
            self._counters.add("rejected_streams")
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"too many experience streams (max {cap}); raise max_streams",
            )
        stream = _Stream(worker_id, outstanding=self._credits)
        with self._workers_lock:
            self._streams.add(stream)
            self._opened_at[worker_id] = time.monotonic()
        self._counters.add("streams_opened")
        self._counters.add("connected_streams")
        return stream

    def _close(self, stream: _Stream) -> None:
        with self._workers_lock:
            self._streams.discard(stream)
        self._counters.add("connected_streams", -1)

    async def _read_fragments(self, request_iterator: AsyncIterator[pb.ExperienceRequest],
                              stream: _Stream) -> None:  # fmt: skip
        try:
            async for request in request_iterator:
                error = self._accept(request, stream)
                if error is not None:
                    kind = "undecodable" if isinstance(request, Undecodable) else "invalid"
                    self._counters.add(f"rejected_{kind}")
                    self._rejections.note(stream.worker_id, kind, error[1])
                    stream.error = error
                    break
        except (grpc.RpcError, asyncio.CancelledError):
            pass  # the call ended (cancelled, too large, server stopping): nothing left to read
        except Exception as e:
            self._rejections.note(stream.worker_id, "internal", f"{type(e).__name__}: {e}")
            stream.error = (grpc.StatusCode.INTERNAL, "the learner failed to read the stream")
        finally:
            stream.grants.put_nowait(None)

    def _accept(self, request: pb.ExperienceRequest, stream: _Stream) -> tuple[grpc.StatusCode, str] | None:
        """Queue one fragment for the learner, or say why the stream must be aborted."""
        if isinstance(request, Undecodable):
            return grpc.StatusCode.INVALID_ARGUMENT, f"undecodable message: {request.error}"
        kind = request.WhichOneof("kind")
        if kind != "fragment":
            return grpc.StatusCode.INVALID_ARGUMENT, f"expected a Fragment, got {kind or 'nothing'}"
        if stream.outstanding <= 0:
            return grpc.StatusCode.INVALID_ARGUMENT, "fragment sent without a credit"
        stream.outstanding -= 1
        fragment = request.fragment
        age_ms = 1000 * (time.monotonic() - stream.opened)
        problem = timing_problem(fragment.span_ms, fragment.waited_ms, stream.said_ms, age_ms)
        if problem is not None:  # checked first: it costs nothing, the decode does
            return grpc.StatusCode.INVALID_ARGUMENT, f"invalid fragment: {problem}"
        try:
            tensors = decode_map(fragment.tensors, self._schema)
        except CodecError as e:
            return grpc.StatusCode.INVALID_ARGUMENT, f"invalid fragment: {e}"
        stream.said_ms += fragment.span_ms
        self._counters.add("actor_span_ms", fragment.span_ms)
        self._counters.add("actor_waited_ms", fragment.waited_ms)
        self._fragments.put((Fragment(stream.worker_id, fragment.policy_version, tensors), stream))
        self._counters.add("fragments_received")
        return None

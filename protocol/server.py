"""The learner's gRPC server: experience in, parameters out, status, health and auth.

It runs on grpc's asyncio API, on an event loop in a thread of its own: every call and stream is
a coroutine of that loop, not a thread of a pool, so hundreds of streams cost a few objects each
(benchmarks/learner_ceiling.py). publish(), next_fragment() and stats may be called from any thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import grpc
from grpc_health.v1 import health_pb2

from surreal.protocol.auth import TokenInterceptor
from surreal.protocol.codec import TensorSpec, encode_map
from surreal.protocol.experience import ExperienceService
from surreal.protocol.messages import Undecodable, peer_host, tolerant
from surreal.protocol.options import MAX_MESSAGE_BYTES, server_options
from surreal.protocol.ratelimit import RejectionLog
from surreal.protocol.stats import Counters
from surreal.protocol.types import EvalReport, Fragment, Params, Sampled
from surreal.protocol.v1 import surreal_pb2 as pb

log = logging.getLogger(__name__)

_SERVICES = pb.DESCRIPTOR.services_by_name
EXPERIENCE_SERVICE: str = _SERVICES["Experience"].full_name
HEALTH_SERVICE: str = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
_HEALTH_REPLY = health_pb2.HealthCheckResponse
_SERVING, _NOT_SERVING = _HEALTH_REPLY.SERVING, _HEALTH_REPLY.NOT_SERVING
_START_TIMEOUT_SECONDS = 30.0
# How long stop() waits, past its grace period, for grpc to finish the cancelled calls.
_STOP_TIMEOUT_SECONDS = 5.0

STAT_NAMES: tuple[str, ...] = (
    "connected_streams",  # experience streams open now
    "streams_opened",  # experience streams accepted since start
    "rejected_streams",  # streams refused because max_streams were open
    "fragments_received",  # valid fragments queued for the learner
    "fragments_taken",  # fragments handed to the learner by next_fragment
    "actor_span_ms",  # what the received fragments said of their senders' time (Fragment.span_ms)
    "actor_waited_ms",  # and of its share they waited (Fragment.waited_ms)
    "rejected_invalid",  # streams aborted with INVALID_ARGUMENT (bad tensors, protocol misuse)
    "rejected_undecodable",  # messages that are not valid protobuf, on any method (INVALID_ARGUMENT)
    "rejected_auth",  # calls refused with UNAUTHENTICATED
    "rejected_evals",  # eval reports with non-finite or impossible values (INVALID_ARGUMENT)
    "params_published",  # publish() calls
    "params_full",  # Get answers that carried weights
    "params_unchanged",  # Get answers "nothing new"
    "status_requests",  # Status.Get calls
    "evals_received",  # Status.ReportEval calls passed to on_eval
    "samples_served",  # Replay.Sample answers that carried rows
    "rejected_samples",  # Replay.Sample requests for no rows, too many, or a bad wait
)
MAX_SAMPLE_ROWS = 1 << 16  # the most rows one Replay.Sample may ask for
MAX_SAMPLE_WAIT_MS = 10_000  # the longest a Replay.Sample may ask the shard to wait

# GetParams.role of the evaluator's calls: with its reports, what `evaluator_heard_at` counts.
EVALUATOR_ROLE = "evaluator"
MAX_ASKERS = 4096  # parameter askers remembered (a peer each: a worker's channel)


@dataclasses.dataclass(frozen=True)
class _Published:
    version: int
    # Both answers serialized once by publish(); Get returns these bytes as they are.
    full: bytes
    unchanged: bytes


_NOTHING_YET = pb.Params(version=-1, unchanged=True).SerializeToString()


def eval_report_problem(report: pb.EvalReport) -> str | None:
    """Why an evaluation report cannot be true, or None: its numbers reach status and TensorBoard."""
    values = (report.mean_return, report.std_return, report.mean_length)
    if not all(math.isfinite(v) for v in values):
        return "non-finite mean_return, std_return or mean_length"
    if report.episodes < 1 or report.env_steps < 0 or report.policy_version < 0:
        return "episodes must be >= 1, env_steps and policy_version >= 0"
    if report.std_return < 0 or report.mean_length < 0:
        return "std_return and mean_length must be >= 0"
    return None


def _unary(handler: Any, request: Any, reply: Any = None) -> grpc.RpcMethodHandler:
    """A unary method's handler whose request deserializer is tolerant (messages.py)."""
    serialize = reply.SerializeToString if reply is not None else None
    return grpc.unary_unary_rpc_method_handler(
        handler, request_deserializer=tolerant(request.FromString), response_serializer=serialize
    )


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def _wait(coro: Any, loop: asyncio.AbstractEventLoop, timeout: float) -> bool:
    """Run `coro` on `loop` from another thread; False if it did not finish within `timeout`."""
    try:
        asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)
        return True
    except (concurrent.futures.TimeoutError, RuntimeError):
        return False


def _stop_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread, timeout: float) -> bool:
    """Cancel what is left on `loop`, stop it and close it; False if its thread did not end."""

    async def cancel_the_rest() -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks, timeout=timeout) if tasks else None

    _wait(cancel_the_rest(), loop, timeout + 1.0)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout)
    if thread.is_alive():
        return False
    loop.close()
    return True


class LearnerServer:
    """Serves one learner, or one replay shard (`sampler`, which answers Replay.Sample). `next_fragment`
    and `publish` may be called from any thread; `status_provider` and `on_eval` are called on the
    server's event-loop thread and must not block; `sampler(rows, wait_seconds)` runs in a thread of
    the loop's executor and may block up to its wait."""

    def __init__(
        self,
        *,
        token: str,
        experience_schema: Mapping[str, TensorSpec],
        host: str = "127.0.0.1",
        port: int = 0,
        credits_per_stream: int = 2,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        max_streams: int = 16,
        status_provider: Callable[[], dict] | None = None,
        on_eval: Callable[[EvalReport], None] | None = None,
        tls: tuple[bytes, bytes] | None = None,
        credit_on_take: bool = True,
        sampler: Callable[[int, float], Sampled] | None = None,
    ) -> None:
        if credits_per_stream < 1:
            raise ValueError(f"credits_per_stream must be >= 1, got {credits_per_stream}")
        if max_streams < 1:
            raise ValueError(f"max_streams must be >= 1, got {max_streams}")
        if max_message_bytes < 1:
            raise ValueError(f"max_message_bytes must be >= 1, got {max_message_bytes}")
        self._counters = Counters(STAT_NAMES)
        # Rejected traffic is logged at a bounded rate: whatever clients send, the log stays small.
        self._rejections = RejectionLog(log, "call")
        self._interceptor = TokenInterceptor(token, self._reject_unauthenticated)
        self._experience = ExperienceService(
            experience_schema, credits_per_stream, max_streams, self._counters,
            RejectionLog(log, "stream"), self._latest_version, credit_on_take,
        )  # fmt: skip
        self._address = _address(host, port)
        self._max_message_bytes = max_message_bytes
        self._status_provider = status_provider
        self._on_eval = on_eval
        self._sampler = sampler
        self._tls = tls
        self._published: _Published | None = None
        # Health by service name ("" is the whole server); replaced whole, never mutated.
        self._health: dict[str, int] = {"": _NOT_SERVING, EXPERIENCE_SERVICE: _NOT_SERVING}
        self._lifecycle = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: grpc.aio.Server | None = None
        self._stopped = False
        # time.monotonic() of the evaluator's last call (a GetParams that says so, a ReportEval)
        self._evaluator_heard_at: float | None = None
        # Who asks for parameters (a channel's peer address) -> (when it last asked: monotonic, the
        # version it holds since): what `behind` reads at the end of a run. Pruned by age.
        self._askers: dict[str, tuple[float, int]] = {}
        self._askers_lock = threading.Lock()

    # ---- lifecycle

    def start(self) -> int:
        """Bind, serve, and report SERVING; returns the bound port."""
        with self._lifecycle:
            if self._server is not None or self._stopped:
                raise RuntimeError("a LearnerServer can be started once")
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="surreal-grpc", daemon=True)
            thread.start()
            self._experience.loop = loop
            try:
                started = asyncio.run_coroutine_threadsafe(self._serve(), loop)
                self._server, port = started.result(_START_TIMEOUT_SECONDS)
            except BaseException:
                self._experience.loop = None
                _stop_loop(loop, thread, _STOP_TIMEOUT_SECONDS)
                raise
            self._loop, self._thread = loop, thread
        self._health = {"": _SERVING, EXPERIENCE_SERVICE: _SERVING}
        log.info("experience server listening on %s (port %d)", self._address, port)
        return port

    def stop(self, grace: float = 1.0, timeout: float = _STOP_TIMEOUT_SECONDS) -> bool:
        """Report NOT_SERVING, end the experience streams (clients see UNAVAILABLE), stop; wake
        every next_fragment() caller (None). Idempotent, and bounded whatever clients did: calls
        still running after `grace` s are cancelled, grpc is told to stop at once `timeout` s later,
        and abandoned after `timeout` more. False unless the first stop ended in time (logged)."""
        with self._lifecycle:
            if self._stopped:
                return True
            self._stopped = True
            server, loop, thread = self._server, self._loop, self._thread
        self._health = {"": _NOT_SERVING, EXPERIENCE_SERVICE: _NOT_SERVING}
        self._experience.shutdown()
        self._rejections.flush(force=True)
        if server is None or loop is None or thread is None:
            return True
        stopped = _wait(server.stop(grace), loop, grace + timeout)
        if not stopped:
            log.warning("the grpc server did not finish its calls within %.0f s of stopping; "
                        "stopping it at once", grace + timeout)  # fmt: skip
            if not _wait(server.stop(0), loop, timeout):
                log.warning("the grpc server did not stop; abandoning it")
        return _stop_loop(loop, thread, timeout) and stopped

    async def _serve(self) -> tuple[grpc.aio.Server, int]:
        server = grpc.aio.server(interceptors=[self._interceptor],
                                 options=server_options(self._max_message_bytes))  # fmt: skip
        # Every request deserializer is tolerant (messages.py): grpc never sees a parse error.
        handlers = {
            EXPERIENCE_SERVICE: {
                "Stream": grpc.stream_stream_rpc_method_handler(
                    self._experience.stream,
                    request_deserializer=tolerant(pb.ExperienceRequest.FromString),
                    response_serializer=pb.Credit.SerializeToString,
                )
            },
            # No reply type: the answers are the bytes publish() serialized once.
            _SERVICES["Parameters"].full_name: {"Get": _unary(self._get_params, pb.GetParams)},
            _SERVICES["Status"].full_name: {
                "Get": _unary(self._get_status, pb.StatusRequest, pb.StatusReply),
                "ReportEval": _unary(self._report_eval, pb.EvalReport, pb.Ack),
            },
            _SERVICES["Replay"].full_name: {"Sample": _unary(self._sample, pb.SampleRequest, pb.Sampled)},
            # Check only: what Kubernetes' grpc probes call. Watch would let any client, without a
            # token (health stays open for probes), hold a call open for as long as it likes.
            HEALTH_SERVICE: {
                "Check": _unary(self._health_check, health_pb2.HealthCheckRequest, _HEALTH_REPLY)
            },
        }
        for service, methods in handlers.items():
            server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, methods),))
        if self._tls is None:
            port = server.add_insecure_port(self._address)
        else:
            port = server.add_secure_port(self._address, grpc.ssl_server_credentials([self._tls]))
        await server.start()
        return server, port

    # ---- learner API

    def publish(self, params: Params) -> None:
        """Make `params` the answer to Parameters.Get; encoded here, once, not per call."""
        full = pb.Params(
            version=params.version,
            weights=encode_map(params.weights),
            extras=encode_map(params.extras),
        ).SerializeToString()
        if len(full) > self._max_message_bytes:
            raise ValueError(
                f"params of {len(full)} bytes exceed max_message_bytes={self._max_message_bytes}"
            )
        unchanged = pb.Params(version=params.version, unchanged=True).SerializeToString()
        # One reference assignment: Get calls see the old or the new snapshot, never a mix.
        self._published = _Published(params.version, full, unchanged)
        self._counters.add("params_published")

    def next_fragment(self, timeout: float | None) -> Fragment | None:
        """The oldest received fragment, waiting up to `timeout` s (None: forever); None on
        timeout or once stopped. Taking a fragment grants its stream one credit back, or, with
        `credit_on_take=False`, the next `release()` does."""
        return self._experience.next_fragment(timeout)

    def release(self) -> None:
        """With `credit_on_take=False`: grant back the credits of every fragment taken so far,
        once the learner has dealt with them (and published what they led to). A no-op otherwise."""
        self._experience.release()

    def pending(self) -> int:
        """Fragments received and not yet taken."""
        return self._experience.pending()

    @property
    def max_streams(self) -> int:
        """Experience streams accepted at once now (more are refused with RESOURCE_EXHAUSTED)."""
        return self._experience.max_streams

    def set_max_streams(self, max_streams: int) -> None:
        """Change the stream capacity while serving (a learner scaled to another agent count);
        thread-safe. Lowering it never ends an open stream: new ones are refused while as many
        as the new cap, or more, are open."""
        self._experience.set_max_streams(max_streams)

    def _latest_version(self) -> int | None:
        published = self._published
        return None if published is None else published.version

    def workers(self) -> tuple[set[str], dict[str, float]]:
        """(worker ids with an experience stream open now, when each last opened one: monotonic)."""
        return self._experience.workers()

    def behind(self, version: int, within: float) -> int:
        """How many of those that asked for parameters in the last `within` seconds hold a version
        older than `version`: at the end, the peers that poll for parameters instead of streaming
        (off-policy actors, replay shards) and have not yet been answered the version saying so."""
        now = time.monotonic()
        with self._askers_lock:
            return sum(now - at <= within and holds < version for at, holds in self._askers.values())

    @property
    def evaluator_heard_at(self) -> float | None:
        """When (time.monotonic()) the evaluator last called: a GetParams with role "evaluator"
        or an eval report; None if it never has."""
        return self._evaluator_heard_at

    @property
    def stats(self) -> dict[str, int]:
        """A snapshot of the counters named in STAT_NAMES."""
        return self._counters.snapshot()

    def actor_seconds(self) -> tuple[float, float]:
        """(seconds spanned, seconds waited) that the received fragments said of their senders."""
        stats = self._counters.snapshot()
        return stats["actor_span_ms"] / 1000, stats["actor_waited_ms"] / 1000

    # ---- handlers (on the event loop)

    def _reject_unauthenticated(self, peer: str) -> None:
        self._counters.add("rejected_auth")
        self._rejections.note(peer_host(peer), "unauthenticated")

    async def _refuse(self, context: grpc.aio.ServicerContext, counter: str, reason: str,
                      message: str) -> None:  # fmt: skip
        """Abort the call with INVALID_ARGUMENT (raises), counted and logged at a bounded rate."""
        self._counters.add(counter)
        self._rejections.note(peer_host(context.peer()), reason, message)
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)

    async def _failed(self, context: grpc.aio.ServicerContext, what: str, error: Exception) -> None:
        """Abort with INTERNAL when our own callback failed (logged at a bounded rate: a client
        that keeps calling must not turn one bug into a log without end)."""
        self._rejections.note("learner", f"{what}_failed", f"{type(error).__name__}: {error}")
        await context.abort(grpc.StatusCode.INTERNAL, f"{what} failed: {error}")

    async def _decoded(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        if isinstance(request, Undecodable):
            await self._refuse(context, "rejected_undecodable", "undecodable",
                               f"undecodable message: {request.error}")  # fmt: skip
        return request

    async def _health_check(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        request = await self._decoded(request, context)
        status = self._health.get(request.service)
        if status is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return _HEALTH_REPLY(status=status)

    async def _get_params(self, request: pb.GetParams, context: grpc.aio.ServicerContext) -> bytes:
        request = await self._decoded(request, context)
        if request.role == EVALUATOR_ROLE:
            self._evaluator_heard_at = time.monotonic()
        published = self._published
        self._asked(context.peer(), request.known_version if published is None else published.version)
        if published is None or request.known_version == published.version:
            self._counters.add("params_unchanged")
            return _NOTHING_YET if published is None else published.unchanged
        self._counters.add("params_full")
        return published.full

    def _asked(self, peer: str, holds: int) -> None:
        now = time.monotonic()
        with self._askers_lock:
            self._askers[peer] = (now, holds)
            if len(self._askers) > MAX_ASKERS:  # peers made up by the thousand: keep the recent
                recent = sorted(self._askers.items(), key=lambda kv: kv[1][0])[-MAX_ASKERS // 2 :]
                self._askers = dict(recent)

    async def _get_status(self, request: pb.StatusRequest, context: grpc.aio.ServicerContext) -> Any:
        await self._decoded(request, context)
        self._counters.add("status_requests")
        if self._status_provider is None:
            return pb.StatusReply(json="{}")
        try:
            text = json.dumps(self._status_provider())
        except Exception as e:
            await self._failed(context, "status provider", e)
        return pb.StatusReply(json=text)

    async def _report_eval(self, request: pb.EvalReport, context: grpc.aio.ServicerContext) -> Any:
        request = await self._decoded(request, context)
        on_eval = self._on_eval
        if on_eval is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "this learner takes no eval reports")
            return None  # not reached: abort raises
        problem = eval_report_problem(request)
        if problem is not None:
            await self._refuse(context, "rejected_evals", "bad_eval", f"invalid eval report: {problem}")
        report = EvalReport(**{f.name: getattr(request, f.name) for f in dataclasses.fields(EvalReport)})
        try:
            on_eval(report)
        except Exception as e:
            await self._failed(context, "on_eval", e)
        self._evaluator_heard_at = time.monotonic()
        self._counters.add("evals_received")
        return pb.Ack()

    async def _sample(self, request: pb.SampleRequest, context: grpc.aio.ServicerContext) -> Any:
        request = await self._decoded(request, context)
        sampler = self._sampler
        if sampler is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "this server holds no replay")
            return None  # not reached: abort raises
        if not 0 < request.rows <= MAX_SAMPLE_ROWS or not 0 <= request.wait_ms <= MAX_SAMPLE_WAIT_MS:
            await self._refuse(context, "rejected_samples", "bad_sample",
                               f"a sample takes 1..{MAX_SAMPLE_ROWS} rows and waits 0..{MAX_SAMPLE_WAIT_MS} "
                               f"ms, got {request.rows} rows, {request.wait_ms} ms")  # fmt: skip
        loop = asyncio.get_running_loop()
        try:
            sampled = await loop.run_in_executor(None, sampler, request.rows, request.wait_ms / 1000)
        except Exception as e:
            await self._failed(context, "sampler", e)
        state = pb.ReplayState(**dataclasses.asdict(sampled.state))
        returns = sampled.episode_returns
        if sampled.rows is None:
            return pb.Sampled(ready=False, state=state, episode_returns=returns)
        self._counters.add("samples_served")
        return pb.Sampled(ready=True, tensors=encode_map(sampled.rows), state=state, episode_returns=returns)

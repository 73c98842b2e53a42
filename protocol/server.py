"""The learner's gRPC server: experience in, parameters out, status, health and auth."""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Callable, Mapping
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2

from surreal.protocol.auth import TokenInterceptor
from surreal.protocol.codec import TensorSpec, encode_map
from surreal.protocol.experience import ExperienceService
from surreal.protocol.messages import Undecodable, peer_host, tolerant
from surreal.protocol.options import server_options
from surreal.protocol.ratelimit import RejectionLog
from surreal.protocol.stats import Counters
from surreal.protocol.types import EvalReport, Fragment, Params
from surreal.protocol.v1 import surreal_pb2 as pb

log = logging.getLogger(__name__)

_SERVICES = pb.DESCRIPTOR.services_by_name
EXPERIENCE_SERVICE: str = _SERVICES["Experience"].full_name

# Pool threads kept free of experience streams (each stream holds one thread for its lifetime),
# so parameter, status and health calls are always served.
_UNARY_RESERVE = 4
# How long stop() waits, past its grace period, for grpc to finish the cancelled calls.
_STOP_TIMEOUT_SECONDS = 5.0
HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name

STAT_NAMES: tuple[str, ...] = (
    "connected_streams",  # experience streams open now
    "streams_opened",  # experience streams accepted since start
    "rejected_streams",  # streams refused because max_workers was reached
    "fragments_received",  # valid fragments queued for the learner
    "fragments_taken",  # fragments handed to the learner by next_fragment
    "rejected_invalid",  # streams aborted with INVALID_ARGUMENT (bad tensors, protocol misuse)
    "rejected_undecodable",  # messages that are not valid protobuf, on any method (INVALID_ARGUMENT)
    "rejected_auth",  # calls refused with UNAUTHENTICATED
    "rejected_evals",  # eval reports with non-finite or impossible values (INVALID_ARGUMENT)
    "params_published",  # publish() calls
    "params_full",  # Get answers that carried weights
    "params_unchanged",  # Get answers "nothing new"
    "status_requests",  # Status.Get calls
    "evals_received",  # Status.ReportEval calls passed to on_eval
)


@dataclass(frozen=True)
class _Published:
    version: int
    # Both answers serialized once by publish(); Get returns these bytes as they are.
    full: bytes
    unchanged: bytes


_NOTHING_YET = pb.Params(version=-1, unchanged=True).SerializeToString()


def _already_serialized(data: bytes) -> bytes:
    return data


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


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


class LearnerServer:
    """Serves one learner. `next_fragment` and `publish` may be called from any thread;
    `status_provider` and `on_eval` are called from grpc threads."""

    def __init__(
        self,
        *,
        token: str,
        experience_schema: Mapping[str, TensorSpec],
        host: str = "127.0.0.1",
        port: int = 0,
        credits_per_stream: int = 2,
        max_message_bytes: int = 64 * 2**20,
        max_workers: int = 16,
        status_provider: Callable[[], dict] | None = None,
        on_eval: Callable[[EvalReport], None] | None = None,
        tls: tuple[bytes, bytes] | None = None,
    ) -> None:
        if credits_per_stream < 1:
            raise ValueError(f"credits_per_stream must be >= 1, got {credits_per_stream}")
        if max_workers <= _UNARY_RESERVE:
            raise ValueError(f"max_workers must be > {_UNARY_RESERVE}, got {max_workers}")
        if max_message_bytes < 1:
            raise ValueError(f"max_message_bytes must be >= 1, got {max_message_bytes}")
        self._counters = Counters(STAT_NAMES)
        # Rejected traffic is logged at a bounded rate: whatever clients send, the log stays small.
        self._rejections = RejectionLog(log, "call")
        self._interceptor = TokenInterceptor(token, self._reject_unauthenticated)
        self._experience = ExperienceService(
            experience_schema, credits_per_stream, max_workers - _UNARY_RESERVE, self._counters,
            RejectionLog(log, "stream"),
        )  # fmt: skip
        self._address = _address(host, port)
        self._max_message_bytes = max_message_bytes
        self._max_workers = max_workers
        self._status_provider = status_provider
        self._on_eval = on_eval
        self._tls = tls
        self._published: _Published | None = None
        self._health = health.HealthServicer()
        for service in ("", EXPERIENCE_SERVICE):
            self._health.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)
        self._lifecycle = threading.Lock()
        self._server: grpc.Server | None = None
        self._stopped = False

    # ---- lifecycle

    def start(self) -> int:
        """Bind, serve, and report SERVING; returns the bound port."""
        with self._lifecycle:
            if self._server is not None or self._stopped:
                raise RuntimeError("a LearnerServer can be started once")
            server = self._build()
            if self._tls is None:
                port = server.add_insecure_port(self._address)
            else:
                creds = grpc.ssl_server_credentials([self._tls])
                port = server.add_secure_port(self._address, creds)
            server.start()
            self._server = server
        for service in ("", EXPERIENCE_SERVICE):
            self._health.set(service, health_pb2.HealthCheckResponse.SERVING)
        log.info("learner server listening on %s (port %d)", self._address, port)
        return port

    def stop(self, grace: float = 1.0, timeout: float = _STOP_TIMEOUT_SECONDS) -> bool:
        """Report NOT_SERVING, end the experience streams (clients see UNAVAILABLE), stop.
        Idempotent; also wakes every next_fragment() caller, which then returns None.

        Bounded whatever clients did: calls still running after `grace` seconds are cancelled, and
        if grpc has not finished them `timeout` seconds later the server is abandoned (logged; its
        port closes with the process). Returns False in that case."""
        with self._lifecycle:
            if self._stopped:
                return True
            self._stopped = True
            server = self._server
        self._health.enter_graceful_shutdown()
        self._experience.shutdown()
        self._rejections.flush(force=True)
        if server is None or server.stop(grace).wait(grace + timeout):
            return True
        log.warning("the grpc server did not finish its calls within %.0f s of stopping; "
                    "abandoning it", grace + timeout)  # fmt: skip
        return False

    def _build(self) -> grpc.Server:
        server = grpc.server(
            futures.ThreadPoolExecutor(self._max_workers, thread_name_prefix="surreal-grpc"),
            interceptors=[self._interceptor],
            options=server_options(self._max_message_bytes),
        )
        # Every request deserializer is tolerant (messages.py): grpc never sees a parse error.
        handlers = {
            _SERVICES["Experience"].full_name: {
                "Stream": grpc.stream_stream_rpc_method_handler(
                    self._experience.stream,
                    request_deserializer=tolerant(pb.ExperienceRequest.FromString),
                    response_serializer=pb.Credit.SerializeToString,
                )
            },
            _SERVICES["Parameters"].full_name: {
                "Get": grpc.unary_unary_rpc_method_handler(
                    self._get_params,
                    request_deserializer=tolerant(pb.GetParams.FromString),
                    response_serializer=_already_serialized,
                )
            },
            _SERVICES["Status"].full_name: {
                "Get": grpc.unary_unary_rpc_method_handler(
                    self._get_status,
                    request_deserializer=tolerant(pb.StatusRequest.FromString),
                    response_serializer=pb.StatusReply.SerializeToString,
                ),
                "ReportEval": grpc.unary_unary_rpc_method_handler(
                    self._report_eval,
                    request_deserializer=tolerant(pb.EvalReport.FromString),
                    response_serializer=pb.Ack.SerializeToString,
                ),
            },
            # Check only: what Kubernetes' grpc probes call. Watch would let any client, without a
            # token (health stays open for probes), hold a pool thread per call for as long as it likes.
            HEALTH_SERVICE: {
                "Check": grpc.unary_unary_rpc_method_handler(
                    self._health_check,
                    request_deserializer=tolerant(health_pb2.HealthCheckRequest.FromString),
                    response_serializer=health_pb2.HealthCheckResponse.SerializeToString,
                )
            },
        }
        for service, methods in handlers.items():
            generic = grpc.method_handlers_generic_handler(service, methods)
            server.add_generic_rpc_handlers((generic,))
            server.add_registered_method_handlers(service, methods)
        return server

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
        # One reference assignment: Get threads see the old or the new snapshot, never a mix.
        self._published = _Published(params.version, full, unchanged)
        self._counters.add("params_published")

    def next_fragment(self, timeout: float | None) -> Fragment | None:
        """The oldest received fragment, waiting up to `timeout` s (None: forever); None on
        timeout or once stopped. Taking a fragment grants its stream one credit back."""
        return self._experience.next_fragment(timeout)

    def pending(self) -> int:
        """Fragments received and not yet taken."""
        return self._experience.pending()

    @property
    def stats(self) -> dict[str, int]:
        """A snapshot of the counters named in STAT_NAMES."""
        return self._counters.snapshot()

    # ---- handlers

    def _reject_unauthenticated(self, peer: str) -> None:
        self._counters.add("rejected_auth")
        self._rejections.note(peer_host(peer), "unauthenticated")

    def _refuse(self, context: grpc.ServicerContext, counter: str, reason: str, message: str) -> None:
        """Abort the call with INVALID_ARGUMENT (raises), counted and logged at a bounded rate."""
        self._counters.add(counter)
        self._rejections.note(peer_host(context.peer()), reason, message)
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)

    def _decoded(self, request: Any, context: grpc.ServicerContext) -> Any:
        if isinstance(request, Undecodable):
            self._refuse(context, "rejected_undecodable", "undecodable", f"undecodable message: "
                         f"{request.error}")  # fmt: skip
        return request

    def _health_check(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._health.Check(self._decoded(request, context), context)

    def _get_params(self, request: pb.GetParams, context: grpc.ServicerContext) -> bytes:
        request = self._decoded(request, context)
        published = self._published
        if published is None:
            self._counters.add("params_unchanged")
            return _NOTHING_YET
        if request.known_version == published.version:
            self._counters.add("params_unchanged")
            return published.unchanged
        self._counters.add("params_full")
        return published.full

    def _get_status(self, request: pb.StatusRequest, context: grpc.ServicerContext) -> Any:
        self._decoded(request, context)
        self._counters.add("status_requests")
        if self._status_provider is None:
            return pb.StatusReply(json="{}")
        try:
            text = json.dumps(self._status_provider())
        except Exception as e:
            log.exception("status provider failed")
            context.abort(grpc.StatusCode.INTERNAL, f"status provider failed: {e}")
        return pb.StatusReply(json=text)

    def _report_eval(self, request: pb.EvalReport, context: grpc.ServicerContext) -> Any:
        request = self._decoded(request, context)
        on_eval = self._on_eval
        if on_eval is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "this learner takes no eval reports")
            return None  # not reached: abort raises
        problem = eval_report_problem(request)
        if problem is not None:
            self._refuse(context, "rejected_evals", "bad_eval", f"invalid eval report: {problem}")
        report = EvalReport(
            policy_version=request.policy_version,
            env_steps=request.env_steps,
            mean_return=request.mean_return,
            std_return=request.std_return,
            episodes=request.episodes,
            mean_length=request.mean_length,
        )
        try:
            on_eval(report)
        except Exception as e:
            log.exception("on_eval failed")
            context.abort(grpc.StatusCode.INTERNAL, f"on_eval failed: {e}")
        self._counters.add("evals_received")
        return pb.Ack()

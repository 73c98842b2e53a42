"""The learner's gRPC server: experience in, parameters out, status, health and auth."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from surreal.protocol.auth import TokenInterceptor
from surreal.protocol.codec import TensorSpec, encode_map
from surreal.protocol.experience import ExperienceService
from surreal.protocol.stats import Counters
from surreal.protocol.types import EvalReport, Fragment, Params
from surreal.protocol.v1 import surreal_pb2 as pb

log = logging.getLogger(__name__)

_SERVICES = pb.DESCRIPTOR.services_by_name
EXPERIENCE_SERVICE: str = _SERVICES["Experience"].full_name

# Pool threads kept free of experience streams (each stream holds one thread for its lifetime),
# so parameter, status and health calls are always served.
_UNARY_RESERVE = 4

STAT_NAMES: tuple[str, ...] = (
    "connected_streams",  # experience streams open now
    "streams_opened",  # experience streams accepted since start
    "rejected_streams",  # streams refused because max_workers was reached
    "fragments_received",  # valid fragments queued for the learner
    "fragments_taken",  # fragments handed to the learner by next_fragment
    "rejected_invalid",  # streams aborted with INVALID_ARGUMENT (bad tensors, protocol misuse)
    "rejected_auth",  # calls refused with UNAUTHENTICATED
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
        self._interceptor = TokenInterceptor(token, lambda: self._counters.add("rejected_auth"))
        self._experience = ExperienceService(
            experience_schema, credits_per_stream, max_workers - _UNARY_RESERVE, self._counters
        )
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

    def stop(self, grace: float = 1.0) -> None:
        """Report NOT_SERVING, end the experience streams (clients see UNAVAILABLE), stop.
        Idempotent; also wakes every next_fragment() caller, which then returns None."""
        with self._lifecycle:
            if self._stopped:
                return
            self._stopped = True
            server = self._server
        self._health.enter_graceful_shutdown()
        self._experience.shutdown()
        if server is not None:
            server.stop(grace).wait()

    def _build(self) -> grpc.Server:
        server = grpc.server(
            futures.ThreadPoolExecutor(self._max_workers, thread_name_prefix="surreal-grpc"),
            interceptors=[self._interceptor],
            options=[
                ("grpc.max_send_message_length", self._max_message_bytes),
                ("grpc.max_receive_message_length", self._max_message_bytes),
                # Two learners on one fixed port must fail to bind, not share traffic.
                ("grpc.so_reuseport", 0),
            ],
        )
        handlers = {
            "Experience": {
                "Stream": grpc.stream_stream_rpc_method_handler(
                    self._experience.stream,
                    request_deserializer=pb.ExperienceRequest.FromString,
                    response_serializer=pb.Credit.SerializeToString,
                )
            },
            "Parameters": {
                "Get": grpc.unary_unary_rpc_method_handler(
                    self._get_params,
                    request_deserializer=pb.GetParams.FromString,
                    response_serializer=_already_serialized,
                )
            },
            "Status": {
                "Get": grpc.unary_unary_rpc_method_handler(
                    self._get_status,
                    request_deserializer=pb.StatusRequest.FromString,
                    response_serializer=pb.StatusReply.SerializeToString,
                ),
                "ReportEval": grpc.unary_unary_rpc_method_handler(
                    self._report_eval,
                    request_deserializer=pb.EvalReport.FromString,
                    response_serializer=pb.Ack.SerializeToString,
                ),
            },
        }
        for short_name, methods in handlers.items():
            service = _SERVICES[short_name].full_name
            generic = grpc.method_handlers_generic_handler(service, methods)
            server.add_generic_rpc_handlers((generic,))
            server.add_registered_method_handlers(service, methods)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
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

    def _get_params(self, request: pb.GetParams, context: grpc.ServicerContext) -> bytes:
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
        on_eval = self._on_eval
        if on_eval is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "this learner takes no eval reports")
            return None  # not reached: abort raises
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

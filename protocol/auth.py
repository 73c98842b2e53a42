"""Token auth: every call carries the experiment token as metadata; an interceptor checks it."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

TOKEN_METADATA_KEY = "x-surreal-token"

# Kubernetes `grpc:` probes cannot send metadata, so the health service stays open.
_OPEN_PREFIX = "/grpc.health.v1.Health/"


def _abort_handler(handler: grpc.RpcMethodHandler, on_reject: Callable[[str], None]) -> grpc.RpcMethodHandler:
    """A handler of the same streaming kind as `handler` that refuses the call."""

    async def refuse(_request: Any, context: grpc.aio.ServicerContext) -> Any:
        on_reject(context.peer())
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, f"missing or wrong {TOKEN_METADATA_KEY}")

    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(refuse)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(refuse)
    return grpc.unary_unary_rpc_method_handler(refuse)


class TokenInterceptor(grpc.aio.ServerInterceptor):
    """UNAUTHENTICATED for any call (but health checks) without the right token; `on_reject` is
    called with the caller's peer string for each refused call."""

    def __init__(self, token: str, on_reject: Callable[[str], None]) -> None:
        if not token:
            raise ValueError("token must be a non-empty string")
        self._token = token.encode()
        self._on_reject = on_reject

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(_OPEN_PREFIX):
            return handler
        for key, value in handler_call_details.invocation_metadata or ():
            if key == TOKEN_METADATA_KEY:
                given = value.encode() if isinstance(value, str) else value
                if hmac.compare_digest(given, self._token):
                    return handler
                break
        return _abort_handler(handler, self._on_reject)

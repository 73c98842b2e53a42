"""Decoding what arrives without letting grpc do it.

A request deserializer that raises makes grpc log a traceback for every such message (a way for
any client to fill a disk) and can leave a stream half-finished so that `server.stop()` never
completes (grpcio 1.85). So every handler takes `tolerant(...)` requests: bytes that are not a valid
message become an `Undecodable`, which the handler rejects (INVALID_ARGUMENT, counted, rate-limited).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MAX_WORKER_ID = 128  # characters of a Hello's worker_id
SPAN_SLACK_MS = 2_000  # how far a stream's spans may run ahead of its age on the server's clock


class Undecodable:
    """Stands for request bytes that did not parse; `error` says why."""

    __slots__ = ("error",)

    def __init__(self, error: str) -> None:
        self.error = error


def tolerant(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    """A request deserializer that returns Undecodable instead of raising."""

    def deserialize(data: bytes) -> Any:
        try:
            return parse(data)
        except Exception as e:  # protobuf's DecodeError, or anything else hostile bytes provoke
            return Undecodable(f"{type(e).__name__}: {e}")

    return deserialize


def worker_id_problem(worker_id: str) -> str | None:
    """Why a Hello's worker_id cannot be used (it names the worker in logs and status), or None."""
    if not worker_id:
        return "empty worker_id"
    if len(worker_id) > MAX_WORKER_ID:
        return f"worker_id longer than {MAX_WORKER_ID} characters"
    if not worker_id.isprintable():
        return "worker_id has non-printable characters"
    return None


def timing_problem(span_ms: int, waited_ms: int, said_ms: int, age_ms: float) -> str | None:
    """Why a fragment's timing (Fragment.span_ms, waited_ms) cannot be true, or None: its stream's
    earlier fragments said `said_ms`, and it has been open `age_ms` by the server's clock (an
    honest sender counts from the opening grant, so its spans never run ahead of that)."""
    if not 0 <= waited_ms <= span_ms:
        return f"impossible timing: waited {waited_ms} ms of {span_ms}"
    if said_ms + span_ms > age_ms + SPAN_SLACK_MS:
        return f"impossible timing: {said_ms + span_ms} ms said on a stream open {age_ms:.0f} ms"
    return None


def peer_host(peer: str) -> str:
    """The address part of a grpc peer string ("ipv4:127.0.0.1:5123" -> "127.0.0.1"): one log
    source per host, not one per connection."""
    kind, _, rest = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        return rest.rsplit(":", 1)[0]
    return peer

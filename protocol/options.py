"""grpc channel arguments of both ends: message limits, keepalive and reconnect timing.

Without keepalive a connection whose network silently drops packets (a cut link, a vanished node)
stays "established" for the kernel's TCP timeout, many minutes: an actor would wait that long for
a credit, and the learner count the dead stream as connected. Both ends ping (the server must be
told to accept the client's pings, or it answers GOAWAY "too_many_pings").

grpc's reconnect backoff reaches 120 s and it re-resolves a name at most every 30 s by default, so
a learner that came back (maybe at another address: a replaced pod, a new container) would be
found late; RECONNECT_SECONDS and RESOLVE_SECONDS bound both.
"""

from __future__ import annotations

KEEPALIVE_SECONDS = 10.0  # client pings an idle or busy connection this often
KEEPALIVE_TIMEOUT_SECONDS = 10.0  # ...and gives it up after this long without an answer
SERVER_KEEPALIVE_SECONDS = 20.0  # the server's own pings, to drop streams of vanished workers
MIN_CLIENT_PING_SECONDS = 5.0  # the server accepts client pings at most this often
RECONNECT_SECONDS = (0.5, 5.0)  # first and longest wait between a channel's connection attempts
RESOLVE_SECONDS = 1.0  # a channel re-resolves its target's name at most this often

MAX_MESSAGE_BYTES = 64 * 2**20  # the largest message either end takes: a fragment, a parameter set

Options = list[tuple[str, int]]


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def server_options(max_message_bytes: int) -> Options:
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
        # Two learners on one fixed port must fail to bind, not share traffic.
        ("grpc.so_reuseport", 0),
        ("grpc.keepalive_time_ms", _ms(SERVER_KEEPALIVE_SECONDS)),
        ("grpc.keepalive_timeout_ms", _ms(KEEPALIVE_TIMEOUT_SECONDS)),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", _ms(MIN_CLIENT_PING_SECONDS)),
    ]


def client_options(max_message_bytes: int) -> Options:
    first, longest = RECONNECT_SECONDS
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.keepalive_time_ms", _ms(KEEPALIVE_SECONDS)),
        ("grpc.keepalive_timeout_ms", _ms(KEEPALIVE_TIMEOUT_SECONDS)),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),  # keep pinging while no data flows
        ("grpc.initial_reconnect_backoff_ms", _ms(first)),
        ("grpc.min_reconnect_backoff_ms", _ms(first)),
        ("grpc.max_reconnect_backoff_ms", _ms(longest)),
        ("grpc.dns_min_time_between_resolutions_ms", _ms(RESOLVE_SECONDS)),
    ]

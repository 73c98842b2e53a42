"""Experience streams over real gRPC on 127.0.0.1: delivery, credit backpressure, isolation of a
bad stream, message limits, and shutdown while a client is blocked."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import grpc
import numpy as np
import pytest

from surreal.protocol import Params, ProtocolError
from surreal.protocol import client as client_module
from surreal.protocol import experience as experience_module
from surreal.protocol.client import rpc
from surreal.protocol.v1 import surreal_pb2 as pb


def _eventually(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def _send_until_error(stream, tensors, timeout: float = 5.0) -> ProtocolError:
    """Keep sending (each send may still find a credit) until the broken stream says so."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            stream.send(0, tensors, timeout=0.2)
        except ProtocolError as e:
            return e
        except TimeoutError:
            pass
    raise AssertionError("the stream never reported its error")


def test_fragments_arrive_intact_and_in_order(make_server, make_client, make_fragment) -> None:
    server, address = make_server(credits_per_stream=4)
    stream = make_client(address).experience("worker-7")
    sent = [make_fragment(n=5, seed=i) for i in range(10)]
    received = []

    def learner() -> None:
        for _ in sent:
            received.append(server.next_fragment(timeout=5))

    thread = threading.Thread(target=learner)
    thread.start()
    for version, tensors in enumerate(sent):
        stream.send(version, tensors, timeout=5)
    thread.join(10)
    assert len(received) == len(sent)
    for version, (fragment, tensors) in enumerate(zip(received, sent, strict=True)):
        assert fragment is not None
        assert fragment.worker_id == "worker-7" and fragment.policy_version == version
        for name, array in tensors.items():
            np.testing.assert_array_equal(fragment.tensors[name], array)
            assert fragment.tensors[name].dtype == array.dtype
    assert server.stats["fragments_received"] == server.stats["fragments_taken"] == 10
    assert server.stats["connected_streams"] == 1


def test_credits_bound_the_queue_and_block_the_sender(make_server, make_client, make_fragment) -> None:
    server, address = make_server(credits_per_stream=2)
    stream = make_client(address).experience("w")
    stream.send(0, make_fragment(), timeout=5)
    stream.send(1, make_fragment(), timeout=5)
    with pytest.raises(TimeoutError):
        stream.send(2, make_fragment(), timeout=0.3)  # the learner took nothing: no credit
    assert _eventually(lambda: server.pending() == 2)

    done = threading.Event()
    thread = threading.Thread(target=lambda: (stream.send(2, make_fragment(), timeout=10), done.set()))
    thread.start()
    assert not done.wait(0.3), "a third send must block while the learner takes nothing"
    assert server.pending() == 2

    first = server.next_fragment(timeout=5)
    assert first is not None and first.policy_version == 0
    assert done.wait(5), "taking a fragment must grant its stream a credit back"
    thread.join(5)
    with pytest.raises(TimeoutError):  # exactly one credit came back, and it is spent
        stream.send(3, make_fragment(), timeout=0.3)
    assert stream.credits == 0
    assert _eventually(lambda: server.pending() == 2)  # 1 left + the one just sent
    assert [server.next_fragment(1).policy_version for _ in range(2)] == [1, 2]  # type: ignore[union-attr]
    assert server.next_fragment(timeout=0.05) is None


class _Clock:
    """`time` of the client and of the server's streams on a clock the test moves (the waits on
    credits still take real time)."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


def test_fragments_say_their_senders_time_and_how_much_of_it_they_waited(
    make_server, make_client, make_fragment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the learner's actors' wait share is made of: each fragment says the sender's time since
    its previous one (since the stream opened, for the first) and how much of it the sender waited:
    for a credit, and idle (note_wait)."""
    clock = _Clock()
    monkeypatch.setattr(client_module, "time", clock)
    monkeypatch.setattr(experience_module, "time", clock)
    server, address = make_server(credits_per_stream=1)
    stream = make_client(address).experience("w")
    assert _eventually(lambda: stream.credits == 1)  # the opening grant: the spans count from it
    clock.now += 10.0
    stream.note_wait(4.0)  # idle 4 s of its first 10
    stream.send(0, make_fragment(), timeout=5)
    assert _eventually(lambda: server.stats["fragments_received"] == 1)
    assert server.actor_seconds() == (10.0, 4.0)

    def blocked() -> bool:  # a thread waits in send or wait_acknowledged, its wait started
        return bool(stream._cond._waiters)

    sent = threading.Event()
    thread = threading.Thread(target=lambda: (stream.send(1, make_fragment(), timeout=10), sent.set()))
    thread.start()
    assert _eventually(blocked), "the second send must wait for a credit"
    clock.now += 3.0  # 3 s blocked while the learner holds the credit
    server.next_fragment(timeout=5)
    assert sent.wait(5)
    thread.join(5)
    assert _eventually(lambda: server.stats["fragments_received"] == 2)
    assert server.actor_seconds() == (13.0, 7.0)

    acknowledged: list[bool] = []  # ES's workers wait until the master has dealt with their results
    thread = threading.Thread(target=lambda: acknowledged.append(stream.wait_acknowledged(10)))
    thread.start()
    assert _eventually(blocked)
    clock.now += 2.0
    server.next_fragment(timeout=5)
    thread.join(5)
    assert acknowledged == [True]
    stream.send(2, make_fragment(), timeout=5)
    assert _eventually(lambda: server.stats["fragments_received"] == 3)
    assert server.actor_seconds() == (15.0, 9.0)

    for version in (3, 4):  # less than a millisecond each: said in whole ones, the rest carried
        clock.now += 0.0006
        stream.note_wait(0.0006)
        server.next_fragment(timeout=5)
        stream.send(version, make_fragment(), timeout=5)
    assert _eventually(lambda: server.stats["fragments_received"] == 5)
    assert server.actor_seconds() == (15.001, 9.001)  # 1.2 ms of each: 1 said (1, then 0), the rest to come


def test_invalid_fragment_aborts_only_its_stream(make_server, make_client, make_fragment) -> None:
    server, address = make_server(credits_per_stream=2)
    good = make_client(address).experience("good")
    bad = make_client(address).experience("bad")
    good.send(0, make_fragment(seed=1), timeout=5)

    wrong_dtype = {**make_fragment(), "obs": np.zeros((3, 4), np.float64)}
    bad.send(0, wrong_dtype, timeout=5)
    error = _send_until_error(bad, make_fragment())
    assert error.code == "INVALID_ARGUMENT" and "obs" in error.message
    assert server.stats["rejected_invalid"] == 1

    # The learner only ever sees the good worker's fragments, and that stream keeps flowing.
    for version in range(1, 6):
        fragment = server.next_fragment(timeout=5)
        assert fragment is not None and fragment.worker_id == "good"
        good.send(version, make_fragment(seed=1), timeout=5)
    assert _eventually(lambda: server.stats["connected_streams"] == 1)


@pytest.mark.parametrize(
    "tensors",
    [
        {"obs": np.zeros((3, 4), np.float32)},  # missing "act"
        {"obs": np.zeros((3, 4), np.float32), "act": np.zeros(3, np.int64), "x": np.zeros(1)},
        {"obs": np.zeros((3, 5), np.float32), "act": np.zeros(3, np.int64)},  # fixed dim
    ],
    ids=["missing", "unexpected", "wrong-dim"],
)
def test_schema_violations_are_invalid_argument(make_server, make_client, tensors) -> None:
    server, address = make_server()
    stream = make_client(address).experience("w")
    stream.send(0, tensors, timeout=5)
    assert _send_until_error(stream, tensors).code == "INVALID_ARGUMENT"
    assert server.pending() == 0


def test_oversized_fragment_is_resource_exhausted(make_server, make_client, make_fragment) -> None:
    server, address = make_server(max_message_bytes=64 * 1024)
    stream = make_client(address).experience("w")
    stream.send(0, make_fragment(n=8192), timeout=5)  # 8192 * 4 * 4 B of obs alone = 128 KiB
    assert _send_until_error(stream, make_fragment()).code == "RESOURCE_EXHAUSTED"
    assert server.pending() == 0


def test_stop_makes_a_blocked_sender_raise(make_server, make_client, make_fragment) -> None:
    server, address = make_server(credits_per_stream=1)
    stream = make_client(address).experience("w")
    stream.send(0, make_fragment(), timeout=5)
    outcome: list[BaseException] = []

    def blocked_send() -> None:
        try:
            stream.send(1, make_fragment(), timeout=10)
        except BaseException as e:  # noqa: BLE001 - the test inspects whatever happened
            outcome.append(e)

    thread = threading.Thread(target=blocked_send)
    thread.start()
    # Waiting, not sleeping: the sender is blocked once it waits on the stream's condition for a
    # credit (Condition keeps its waiters in `_waiters`).
    assert _eventually(lambda: len(stream._cond._waiters) == 1)  # type: ignore[attr-defined]
    assert _eventually(lambda: server.pending() == 1)  # the first fragment reached the learner
    started = time.monotonic()
    server.stop(grace=5.0)
    # The server ends its streams itself instead of letting them run into the grace period.
    assert time.monotonic() - started < 2.5
    thread.join(5)
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], ProtocolError), outcome
    assert outcome[0].code == "UNAVAILABLE" and "shutting down" in outcome[0].message
    assert server.next_fragment(timeout=1).policy_version == 0  # type: ignore[union-attr]
    assert server.next_fragment(timeout=None) is None


def test_client_close_delivers_what_was_sent(make_server, make_client, make_fragment) -> None:
    server, address = make_server(credits_per_stream=3)
    stream = make_client(address).experience("w")
    for version in range(3):
        stream.send(version, make_fragment(), timeout=5)
    stream.close()
    stream.close()  # idempotent
    assert [server.next_fragment(5).policy_version for _ in range(3)] == [0, 1, 2]  # type: ignore[union-attr]
    assert _eventually(lambda: server.stats["connected_streams"] == 0)
    with pytest.raises(ProtocolError) as info:
        stream.send(3, make_fragment(), timeout=1)
    assert info.value.code == "CANCELLED"


def test_streams_beyond_max_streams_are_refused_not_hung(make_server, make_client, make_fragment) -> None:
    server, address = make_server(max_streams=2)
    client = make_client(address)
    streams = [client.experience(f"w{i}") for i in range(2)]
    for stream in streams:
        stream.send(0, make_fragment(), timeout=5)
    extra = client.experience("w-extra")
    assert _send_until_error(extra, make_fragment()).code == "RESOURCE_EXHAUSTED"
    assert server.stats["rejected_streams"] == 1
    server.publish(Params(1, {}, {}))
    assert client.get_params() is not None  # unary calls are still served


def test_max_streams_can_be_raised_and_lowered_while_serving(make_server, make_client, make_fragment) -> None:
    """A learner scaled to more agents takes more streams; scaled to fewer, it ends none of the
    open streams (they keep delivering) and refuses new ones until fewer than the cap are open."""
    server, address = make_server(max_streams=2)
    client = make_client(address)
    streams = [client.experience(f"w{i}") for i in range(2)]
    for stream in streams:
        stream.send(0, make_fragment(), timeout=5)
    assert _eventually(lambda: server.stats["connected_streams"] == 2)

    server.set_max_streams(4)
    assert server.max_streams == 4
    streams += [client.experience(f"w{i}") for i in range(2, 4)]
    for stream in streams[2:]:
        stream.send(0, make_fragment(), timeout=5)
    assert _eventually(lambda: server.stats["connected_streams"] == 4)
    assert server.stats["rejected_streams"] == 0

    server.set_max_streams(1)
    for version, stream in enumerate(streams, start=1):  # every open stream still delivers
        assert server.next_fragment(timeout=5) is not None
        stream.send(version, make_fragment(), timeout=5)
    assert server.stats["connected_streams"] == 4
    extra = client.experience("w-extra")
    assert _send_until_error(extra, make_fragment()).code == "RESOURCE_EXHAUSTED"
    assert server.stats["rejected_streams"] == 1 and server.stats["connected_streams"] == 4

    for stream in streams[1:]:  # scaled down: three workers go
        stream.close()
    assert _eventually(lambda: server.stats["connected_streams"] == 1)
    again = client.experience("w-again")  # one open, cap 1: still refused
    assert _send_until_error(again, make_fragment()).code == "RESOURCE_EXHAUSTED"
    streams[0].close()
    assert _eventually(lambda: server.stats["connected_streams"] == 0)
    last = client.experience("w-last")
    last.send(9, make_fragment(), timeout=5)
    assert _eventually(lambda: server.stats["connected_streams"] == 1)
    assert server.stats["rejected_streams"] == 2


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_max_streams_must_stay_a_positive_integer(make_server, bad) -> None:
    server, _ = make_server(max_streams=2)
    with pytest.raises(ValueError, match="max_streams"):
        server.set_max_streams(bad)
    assert server.max_streams == 2


def _raw_fragment(tensors: list[pb.Tensor], **timing: int) -> pb.ExperienceRequest:
    return pb.ExperienceRequest(fragment=pb.Fragment(policy_version=0, tensors=tensors, **timing))


_HELLO = pb.ExperienceRequest(hello=pb.Hello(worker_id="raw"))
_GOOD = [
    pb.Tensor(name="obs", dtype=pb.FLOAT32, shape=[1, 4], data=bytes(16)),
    pb.Tensor(name="act", dtype=pb.INT64, shape=[1], data=bytes(8)),
]


@pytest.mark.parametrize(
    ("requests", "match"),
    [
        ([_raw_fragment(_GOOD)], "Hello"),
        ([_HELLO, *[_raw_fragment(_GOOD)] * 3], "without a credit"),  # 2 credits granted
        ([_HELLO, _raw_fragment([_GOOD[0], pb.Tensor(name="act", dtype=pb.INT64, shape=[2],
                                                      data=bytes(8))])], "8 bytes"),
        ([_HELLO, _raw_fragment([_GOOD[0], pb.Tensor(name="act", dtype=42, shape=[1],
                                                      data=bytes(8))])], "unknown dtype"),
        ([_HELLO, _HELLO], "expected a Fragment"),
        ([_HELLO, _raw_fragment(_GOOD, span_ms=5, waited_ms=6)], "impossible timing"),
        ([_HELLO, _raw_fragment(_GOOD, span_ms=-1, waited_ms=-1)], "impossible timing"),
        ([_HELLO, _raw_fragment(_GOOD, span_ms=60_000)], "60000 ms said on a stream open"),
    ],
    ids=["no-hello", "ignores-credits", "bytes-vs-shape", "unknown-dtype", "second-hello",
         "waited-beyond-span", "negative-time", "span-beyond-the-streams-age"],
)  # fmt: skip
def test_protocol_violations_from_a_raw_client(make_server, token, requests, match) -> None:
    server, address = make_server(credits_per_stream=2)
    with grpc.insecure_channel(address) as channel:
        call = rpc(channel, "Experience", "Stream")(
            iter(requests), metadata=(("x-surreal-token", token),), timeout=5
        )
        with pytest.raises(grpc.RpcError) as info:
            for _ in call:
                pass
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert match in info.value.details()
    assert server.stats["rejected_invalid"] == 1
    assert server.pending() <= 2


def test_credits_say_the_latest_published_version(make_server, make_client, make_fragment) -> None:
    server, address = make_server(credits_per_stream=1)
    stream = make_client(address).experience("w")
    assert _eventually(lambda: stream.credits == 1)
    assert stream.latest_version is None  # nothing published yet: the actor must ask
    server.publish(Params(3, {}, {}))
    stream.send(3, make_fragment(), timeout=5)
    assert server.next_fragment(timeout=5) is not None
    assert _eventually(lambda: stream.credits == 1)
    assert stream.latest_version == 3  # the credit that came back says which version is current
    server.publish(Params(4, {}, {}))
    stream.send(3, make_fragment(), timeout=5)
    server.next_fragment(timeout=5)
    assert _eventually(lambda: stream.latest_version == 4)


def test_a_learner_that_credits_after_processing_says_the_version_its_fragment_made(
    make_server, make_client, make_fragment
) -> None:
    """credit_on_take=False: a taken fragment's credit comes back only at release(), and with the
    version published before it, so the actor knows its fragment's effect is in that version."""
    server, address = make_server(credits_per_stream=1, credit_on_take=False)
    stream = make_client(address).experience("w")
    server.publish(Params(3, {}, {}))
    assert _eventually(lambda: stream.credits == 1)
    assert stream.wait_acknowledged(0.1)  # nothing sent yet: nothing to wait for
    stream.send(3, make_fragment(), timeout=5)
    assert server.next_fragment(timeout=5) is not None
    assert not stream.wait_acknowledged(0.3)  # taken, not released
    assert stream.credits == 0
    server.publish(Params(4, {}, {}))  # what the fragment led to
    server.release()
    assert stream.wait_acknowledged(5)
    assert stream.credits == 1 and stream.latest_version == 4
    server.release()  # nothing held: no credit appears from nowhere
    # A barrier, not a sleep: a credit that a later fragment earns comes down the same stream
    # after anything that release could have sent, so one credit then means none came from it.
    stream.send(4, make_fragment(), timeout=5)
    assert server.next_fragment(timeout=5) is not None
    server.publish(Params(5, {}, {}))
    server.release()
    assert _eventually(lambda: stream.latest_version == 5)
    assert stream.credits == 1


def test_wait_acknowledged_counts_every_fragment_in_flight(make_server, make_client, make_fragment) -> None:
    server, address = make_server(credits_per_stream=3)  # credit on take, the default
    stream = make_client(address).experience("w")
    for i in range(3):
        stream.send(i, make_fragment(), timeout=5)
    assert server.next_fragment(timeout=5) is not None
    assert server.next_fragment(timeout=5) is not None
    assert not stream.wait_acknowledged(0.3)  # one of three still waits in the learner's queue
    assert server.next_fragment(timeout=5) is not None
    assert stream.wait_acknowledged(5)
    server.release()  # a no-op for a learner that credits on take
    assert stream.credits == 3


def test_wait_acknowledged_returns_false_once_the_stream_is_broken(
    make_server, make_client, make_fragment
) -> None:
    server, address = make_server(credits_per_stream=2, credit_on_take=False)
    stream = make_client(address).experience("w")
    stream.send(0, make_fragment(), timeout=5)
    assert _eventually(lambda: server.pending() == 1)
    server.stop(grace=0)
    start = time.monotonic()
    assert not stream.wait_acknowledged(5)
    assert time.monotonic() - start < 4  # the broken stream ended the wait, not the timeout

"""work_connected: reconnects with doubling backoff, resets it on success, gives up in the end."""

from __future__ import annotations

from typing import Any

import pytest

from surreal.protocol.client import ProtocolError
from surreal.runtime import reconnect
from surreal.runtime.exits import EXIT_LEARNER_GONE


class FakeStream:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


class FakeClient:
    """wait_ready fails while `down` > 0 (counting down per call)."""

    def __init__(self, down: int) -> None:
        self.down, self.streams, self.waits = down, [], []

    def wait_ready(self, timeout: float) -> None:
        self.waits.append(timeout)
        if self.down > 0:
            self.down -= 1
            raise ConnectionError("learner not ready")

    def experience(self, worker_id: str) -> FakeStream:
        self.streams.append(FakeStream())
        return self.streams[-1]


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(reconnect.time, "sleep", slept.append)
    return slept


def test_backoff_doubles_up_to_its_cap_then_work_runs(sleeps: list[float]) -> None:
    client, connects = FakeClient(down=7), []
    work, connected = (lambda stream: 0), (lambda: connects.append(1))
    code = reconnect.work_connected(client, "actor-0", work, on_connect=connected)  # type: ignore[arg-type]
    assert code == 0
    assert sleeps == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert connects == [1] and [s.closed for s in client.streams] == [True]


def test_a_stream_lost_mid_work_reconnects_with_a_fresh_backoff(sleeps: list[float]) -> None:
    client = FakeClient(down=1)
    calls: list[Any] = []

    def work(stream: FakeStream) -> int:
        calls.append(stream)
        if len(calls) == 1:
            client.down = 1  # the learner restarts: the next wait_ready fails once
            raise ProtocolError("UNAVAILABLE", "stream reset")
        return 3

    assert reconnect.work_connected(client, "actor-0", work) == 3  # type: ignore[arg-type]
    # 0.5 before the first connection; after the loss the backoff starts again at 0.5, not 1.0
    assert sleeps == [0.5, 0.5, 1.0]
    assert len(calls) == 2 and all(s.closed for s in client.streams)


def test_a_worker_apart_from_the_learner_asks_it_often_whether_the_run_is_over(sleeps: list[float]) -> None:
    """An actor whose shard is out of reach asks the learner whether the run is over after every
    short wait and backoff: the learner, at the end, serves on only for workers that asked it within
    ASKING_SECONDS (serving.release_workers), and an actor that waited 30 s for its shard near the
    end was not among them (it then found shard and learner gone: seen in CI)."""
    from surreal.runtime.serving import ASKING_SECONDS

    client, asked = FakeClient(down=10**6), []

    def ended() -> bool:
        asked.append(1)
        return len(asked) == 8

    assert reconnect.work_connected(client, "actor-0", lambda s: 1, ended=ended) == 0  # type: ignore[arg-type]
    assert len(asked) == 8 and client.streams == []
    gaps = [wait + sleep for wait, sleep in zip(client.waits, [*sleeps, 0.0], strict=True)]
    assert max(gaps) == 2 * reconnect.ENDED_CHECK_SECONDS < ASKING_SECONDS, gaps


def test_gives_up_with_the_learner_gone_exit_code(sleeps: list[float]) -> None:
    # 69 (EX_UNAVAILABLE) is what the Jobs' podFailurePolicy fails the workers on: not a crash (1).
    client = FakeClient(down=10**6)
    code = reconnect.work_connected(client, "actor-0", lambda s: 0, give_up_seconds=-1.0)  # type: ignore[arg-type]
    assert code == EXIT_LEARNER_GONE == 69
    assert sleeps == [] and client.streams == []

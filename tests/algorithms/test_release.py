"""The end of a run: whom a finished learner keeps serving so that every worker sees `done`
(owed_the_end, release_workers), whom it stops waiting for (a stream that stays open after the end
belongs to a worker that does not listen, as a hostile or buggy peer would), and the workers a
restarted learner inherits (WORKERS_FILE)."""

from __future__ import annotations

import json
import time

import pytest
from fake_time import Clock, ClockServer
from test_scale import FakeCore, context  # a core and a run context for a real ServingLoop

from surreal.runtime import serving
from surreal.runtime.serving import (
    HANG_UP_SECONDS,
    RECENT_WORKER_SECONDS,
    RETIRE_SECONDS,
    owed_at_end,
    owed_the_end,
)

END = 1000.0


def test_a_reconnecting_worker_is_owed_until_it_opens_a_stream_after_the_end() -> None:
    missing, listening = owed_the_end(END, END + 5, {"actor-1"}, set(), {"actor-1": END - 3})
    assert (missing, listening) == ({"actor-1"}, set())
    # It came back: its new stream gets `done` with its first parameters.
    missing, listening = owed_the_end(END, END + 6, missing, {"actor-1"}, {"actor-1": END + 5.5})
    assert (missing, listening) == (set(), {"actor-1"})


def test_an_open_stream_is_waited_for_a_bounded_time_after_the_end() -> None:
    opened = {"actor-0": END - 100}
    assert owed_the_end(END, END + 1, set(), {"actor-0"}, opened) == (set(), {"actor-0"})
    assert owed_the_end(END, END + HANG_UP_SECONDS, set(), {"actor-0"}, opened) == (set(), set())


def test_a_stream_opened_after_the_end_gets_its_own_bound() -> None:
    opened = {"actor-0": END + 20}
    assert owed_the_end(END, END + 25, set(), {"actor-0"}, opened) == (set(), {"actor-0"})
    assert owed_the_end(END, END + 20 + HANG_UP_SECONDS, set(), {"actor-0"}, opened) == (set(), set())


def test_nothing_open_and_nobody_missing_owes_nothing() -> None:
    assert owed_the_end(END, END, set(), set(), {}) == (set(), set())


def test_at_the_end_the_workers_away_are_owed_except_those_a_scale_down_retired() -> None:
    """actor-1 was retired by a scale down at END - 40 and sent its last fragment 2 s later,
    while it stopped; actor-0 was kept and is reconnecting at the end; actor-2 streams still;
    actor-3 went silent long ago. Only actor-0 is waited for (the run used to wait RELEASE_SECONDS
    for actor-1, which never comes back)."""
    scaled = END - 40
    known = {
        "actor-0": END - 1,
        "actor-1": scaled + 2,
        "actor-2": END,
        "actor-3": END - RECENT_WORKER_SECONDS - 1,
    }
    assert owed_at_end(known, {"actor-2"}, END, scaled + RETIRE_SECONDS) == {"actor-0"}
    # No scale down: everyone heard from lately and away is owed.
    assert owed_at_end(known, {"actor-2"}, END, float("-inf")) == {"actor-0", "actor-1"}


class Server(ClockServer):
    """What release_workers sees of the server: each call to workers() gives the next of
    `script` (the last one repeats); each wait for a fragment takes its timeout on `clock`."""

    def __init__(
        self, clock: Clock, script: list[tuple[set[str], dict[str, float]]], current_at: float = END
    ) -> None:
        super().__init__(clock)
        self.script, self.calls, self.current_at = script, 0, current_at

    def workers(self) -> tuple[set[str], dict[str, float]]:
        self.calls += 1
        return self.script[min(self.calls, len(self.script)) - 1]

    def behind(self, version: int, within: float) -> int:
        """One worker polling for parameters holds an older version until `current_at`."""
        assert version == DONE_VERSION
        return int(self.clock.now < self.current_at)


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock(END)
    monkeypatch.setattr(serving, "time", clock)
    return clock


DONE_VERSION = 7


def release(
    clock: Clock, away: set[str], script: list[tuple[set[str], dict[str, float]]], current_at: float = END
) -> float:
    """Seconds release_workers served, for workers `away` at the end, seeing `script`, and a worker
    polling for parameters that holds the version saying `done` from `current_at` on."""
    loop = serving.ServingLoop.__new__(serving.ServingLoop)  # no core, no real server: only this
    loop._done_at, loop._away_at_end, loop._published_version = END, away, DONE_VERSION
    loop.server = Server(clock, script, current_at)  # type: ignore[assignment]
    loop.release_workers(timeout=serving.RELEASE_SECONDS)
    return clock.now - END


def test_workers_open_at_the_end_that_hung_up_are_not_waited_for(clock: Clock) -> None:
    # The normal end: both streams close once `done` reaches them; nobody was away.
    opened = {"actor-0": END - 50, "actor-1": END - 50}
    assert (
        release(clock, set(), [({"actor-0", "actor-1"}, opened), ({"actor-1"}, opened), (set(), opened)]) < 1
    )


def test_a_worker_away_at_the_end_is_waited_for_until_it_comes_back(clock: Clock) -> None:
    back = END + 4.0
    script = [(set(), {"actor-1": END - 3})] * 40 + [
        ({"actor-1"}, {"actor-1": back}),
        (set(), {"actor-1": back}),
    ]
    assert 4.0 <= release(clock, {"actor-1"}, script) < 5.0


def test_a_worker_that_never_comes_back_is_waited_for_at_most_the_release_time(clock: Clock, caplog) -> None:
    assert release(clock, {"actor-1"}, [(set(), {"actor-1": END - 3})]) == pytest.approx(
        serving.RELEASE_SECONDS, abs=0.2
    )
    assert "did not come back to see the end: ['actor-1']" in caplog.text


def test_a_stream_left_open_after_the_end_holds_the_learner_only_briefly(clock: Clock, caplog) -> None:
    waited = release(clock, set(), [({"rogue"}, {"rogue": END - 30})])
    assert waited == pytest.approx(HANG_UP_SECONDS, abs=0.2)
    assert "kept their streams open after the end: ['rogue']" in caplog.text


def test_the_workers_file_survives_the_learner_and_a_bad_one_is_no_workers(tmp_path) -> None:
    path = tmp_path / serving.WORKERS_FILE
    assert serving.read_workers(path) == {}
    path.write_text('{"workers": {"actor-0": 1795620000.5, "actor-1": 1795620001}}')
    assert serving.read_workers(path) == {"actor-0": 1795620000.5, "actor-1": 1795620001.0}
    for bad in ("", "[]", '{"workers": ["actor-0"]}', '{"workers": {"actor-0": "x", "a": true}}', "\\xff"):
        path.write_text(bad)
        assert serving.read_workers(path) == {}, bad


def test_a_restarted_learner_knows_its_predecessors_workers_until_a_scale(tmp_path) -> None:
    seen = {"actor-0": 1795620000.0, "actor-1": 1795620001.0}
    (tmp_path / serving.WORKERS_FILE).write_text(json.dumps({"workers": seen}))
    loop = serving.ServingLoop(FakeCore(), context(tmp_path), take=lambda f: None, experience_schema={},
                               credits_per_stream=1, agents=2)  # fmt: skip
    try:
        assert loop._known == seen
        loop.set_agents(1)  # a scale down: the workers it retires will not come back
        assert loop._known == {} and serving.read_workers(tmp_path / serving.WORKERS_FILE) == {}
    finally:
        loop.server.stop(grace=0)


def test_at_the_end_the_workers_away_are_those_heard_from_lately_and_only_they_stay_known(tmp_path) -> None:
    class Done(FakeCore):
        done = True  # the run's last env step has come: train() goes straight to the end

        def save(self, clean: bool = False) -> None:
            pass

    now = time.time()
    seen = {"actor-0": now - 10, "actor-9": now - serving.RECENT_WORKER_SECONDS - 60}  # actor-9: retired
    (tmp_path / serving.WORKERS_FILE).write_text(json.dumps({"workers": seen}))
    loop = serving.ServingLoop(Done(), context(tmp_path), take=lambda f: None, experience_schema={},
                               credits_per_stream=1, agents=2)  # fmt: skip
    try:
        assert loop.train()
        assert loop._away_at_end == {"actor-0"}  # no stream open: it was reconnecting
        # A learner restarted from here waits for actor-0 only.
        assert serving.read_workers(tmp_path / serving.WORKERS_FILE) == {"actor-0": seen["actor-0"]}
    finally:
        loop.server.stop(grace=0)


def test_a_rank_committed_to_the_groups_update_runs_it_before_it_stops(tmp_path, monkeypatch) -> None:
    """SIGTERM reaches every rank at once. A rank that committed to the group's next update (the
    others may be in its collectives already) runs it, then saves and leaves: in CI, rank 1 left
    while rank 0 gathered for it, and rank 0 saved nothing clean (3 updates lost)."""
    from surreal.runtime import preemption

    class Committed(FakeCore):
        holding = True  # committed to the next update when SIGTERM came

        def __init__(self) -> None:
            super().__init__()
            self.updates: list[int] = []
            self.saved: list[int] = []

        def ready(self) -> bool:
            return self.holding  # the others have committed too

        def update(self) -> None:
            self.updates.append(self.version)
            self.version += 1
            self.holding = False

        def save(self, clean: bool = False) -> None:
            self.saved.append(self.version)

    monkeypatch.setattr(preemption, "_requested", preemption.threading.Event())
    core = Committed()
    loop = serving.ServingLoop(core, context(tmp_path), take=lambda f: None, experience_schema={},
                               credits_per_stream=1, agents=2)  # fmt: skip
    try:
        preemption._requested.set()
        assert not loop.train()  # stopped: the version it has is saved
        assert (core.updates, core.saved) == ([0], [1])  # the committed update, then the save
    finally:
        loop.server.stop(grace=0)


def test_a_worker_polling_for_parameters_is_served_until_it_holds_the_last_version() -> None:
    """Off-policy actors and replay shards stream nothing to the learner: they learn of the end
    from the parameters' version, so the learner serves until the last asker has it (CI, on a busy
    machine: actors that asked a moment too late kept asking a learner that was gone)."""
    clock = Clock(END)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(serving, "time", clock)
        assert 3.0 <= release(clock, set(), [(set(), {})], current_at=END + 3.0) < 4.0
        clock.now = END
        # One that never catches up holds the learner only for the release time.
        assert release(clock, set(), [(set(), {})], current_at=float("inf")) == pytest.approx(
            serving.RELEASE_SECONDS, abs=0.5
        )

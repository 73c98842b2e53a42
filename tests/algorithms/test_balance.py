"""The run watches its own balance (runtime/progress.py): every learner's update share over its
recent window, and what it says of the packing, on a clock the test moves."""

from __future__ import annotations

from collections import deque

import pytest
from fake_time import Clock

from surreal.runtime import progress
from surreal.runtime.progress import ACTOR_BOUND, LEARNER_BOUND, LearnerProgress, balance


class Core(LearnerProgress):
    """A learner core whose updates take what the test says."""

    recent_returns = 1

    def __init__(self) -> None:
        self.counters = progress.Counters()
        self.train_returns: deque[float] = deque()
        self._tb = None
        self.updating = 0.0
        self._init_progress()

    @property
    def done(self) -> bool:
        return False

    def busy_seconds(self) -> float:
        return self.updating


def run(monkeypatch: pytest.MonkeyPatch, share: float, seconds: int = 40) -> Core:
    """A core that takes in 100 env steps every half second and updates `share` of the time."""
    clock = Clock(1000.0)
    monkeypatch.setattr(progress, "time", clock)
    core = Core()
    for _ in range(2 * seconds):
        clock.now += 0.5
        core.updating += 0.5 * share
        core.counters.env_steps += 100
        core._note_steps()
    return core


@pytest.mark.parametrize("share", [0.0, 0.25, 0.5, 0.95, 1.0])
def test_the_update_share_is_the_windows_time_in_updates(monkeypatch: pytest.MonkeyPatch, share: float
                                                          ) -> None:  # fmt: skip
    core = run(monkeypatch, share)
    assert core.update_share() == pytest.approx(share)
    assert core.steps_per_second() == pytest.approx(200.0)
    status = core.contract_status(0, 1)
    assert status["update_share"] == pytest.approx(share) and status["balance"] == balance(share)


def test_notes_closer_than_the_sample_interval_keep_the_window_long(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fragment every millisecond must not shrink the window to 64 ms: the newest sample is kept
    current instead of pushing old ones out."""
    clock = Clock(0.0)
    monkeypatch.setattr(progress, "time", clock)
    core = Core()
    for _ in range(10_000):
        clock.now += 0.001
        core.updating += 0.0005
        core.counters.env_steps += 1
        core._note_steps()
    (t0, _, _), (t1, _, _) = core._rate[0], core._rate[-1]
    assert t1 == pytest.approx(10.0) and t0 == pytest.approx(0.001)
    assert core.update_share() == pytest.approx(0.5)


def test_a_core_that_does_not_say_its_time_has_no_share(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Core, "busy_seconds", lambda self: None)
    core = run(monkeypatch, 0.5)
    assert core.update_share() is None and core.contract_status(0, 1)["balance"] is None


def test_balance_says_which_side_waits_and_what_to_change() -> None:
    assert "it is the cap and the actors wait on it" in balance(LEARNER_BOUND)
    assert "--learners" in balance(1.0)
    assert "waits on the actors" in balance(ACTOR_BOUND) and "more actor CPUs" in balance(0.0)
    assert "in balance" in balance((LEARNER_BOUND + ACTOR_BOUND) / 2)
    assert balance(None) is None and balance(0.99, done=True) is None

"""The run watches its own balance (runtime/progress.py): every learner's update share and its
actors' wait share over its recent window, and what they say of the packing, on a clock the test
moves."""

from __future__ import annotations

from collections import deque

import pytest
from fake_time import Clock

from surreal.runtime import progress
from surreal.runtime.progress import ACTOR_BOUND, LEARNER_BOUND, MOSTLY, LearnerProgress, balance


class Core(LearnerProgress):
    """A learner core whose updates take what the test says."""

    recent_returns = 1

    def __init__(self) -> None:
        self.counters = progress.Counters()
        self.train_returns: deque[float] = deque()
        self._tb = None
        self.updating = 0.0
        self._init_progress()
        self.said = (0.0, 0.0)  # (seconds spanned, seconds waited) its actors said
        self.actor_clock = lambda: self.said

    @property
    def done(self) -> bool:
        return False

    def busy_seconds(self) -> float:
        return self.updating


def run(monkeypatch: pytest.MonkeyPatch, share: float, seconds: int = 40, wait: float | None = None,
        actors: int = 4) -> Core:  # fmt: skip
    """A core that takes in 100 env steps every half second and updates `share` of the time, fed by
    `actors` actors that say they waited `wait` of theirs (None: they say nothing, as old ones)."""
    clock = Clock(1000.0)
    monkeypatch.setattr(progress, "time", clock)
    core = Core()
    for _ in range(2 * seconds):
        clock.now += 0.5
        core.updating += 0.5 * share
        if wait is not None:
            span, waited = core.said
            core.said = (span + 0.5 * actors, waited + 0.5 * actors * wait)
        core.counters.env_steps += 100
        core._note_steps()
    return core


@pytest.mark.parametrize("share", [0.0, 0.25, 0.5, 0.95, 1.0])
def test_the_update_share_is_the_windows_time_in_updates(monkeypatch: pytest.MonkeyPatch, share: float
                                                          ) -> None:  # fmt: skip
    core = run(monkeypatch, share, wait=1 - share)
    assert core.update_share() == pytest.approx(share)
    assert core.wait_share() == pytest.approx(1 - share)
    assert core.steps_per_second() == pytest.approx(200.0)
    status = core.contract_status(0, 1)
    assert status["update_share"] == pytest.approx(share)
    assert status["actor_wait_share"] == pytest.approx(1 - share)
    assert status["balance"] == balance(status["update_share"], status["actor_wait_share"])


def test_actors_that_say_nothing_have_no_wait_share(monkeypatch: pytest.MonkeyPatch) -> None:
    """Older actors send fragments without their timing: the share is unknown, not 0."""
    core = run(monkeypatch, 0.5)
    assert core.wait_share() is None and core.contract_status(0, 1)["actor_wait_share"] is None
    assert core.contract_status(0, 1)["balance"] == balance(0.5)


def test_a_clock_that_goes_back_gives_a_share_in_range() -> None:
    """A shard's counts after a SIGKILL restart from its last note (up to seconds behind): the window
    may see them go back, and the share stays a share."""
    core = Core()

    def share(*clocks: tuple[float, float]) -> float | None:
        core._rate.clear()
        core._rate.extend((float(i), i, 0.0, clock) for i, clock in enumerate(clocks))
        return core.wait_share()

    assert share((10.0, 5.0), (9.0, 5.0)) is None  # the span went back: nothing to say
    assert share((10.0, 5.0), (11.0, 105.0)) == 1.0
    assert share((10.0, 5.0), (110.0, -5.0)) == 0.0


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
    (t0, _, _, _), (t1, _, _, _) = core._rate[0], core._rate[-1]
    assert t1 == pytest.approx(10.0) and t0 == pytest.approx(0.001)
    assert core.update_share() == pytest.approx(0.5)


def test_a_core_that_does_not_say_its_time_has_no_share(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Core, "busy_seconds", lambda self: None)
    core = run(monkeypatch, 0.5)
    assert core.update_share() is None and core.contract_status(0, 1)["balance"] is None


MIDDLE = (LEARNER_BOUND + ACTOR_BOUND) / 2  # an update share of a learner in balance


@pytest.mark.parametrize(
    ("update", "wait", "says"),
    [
        # the learner's share alone (actors that do not say their time): its extremes
        (LEARNER_BOUND, None, "the learner is the cap; fewer actor CPUs"),
        (ACTOR_BOUND, None, "the learner waits on the actors; more actor CPUs"),
        (MIDDLE, None, "actors and learner are in balance"),
        (None, MOSTLY, "the actors wait on it 50% of theirs: the learner is the cap"),
        # both: the side that waits most of its time waits on the other
        (0.98, 0.77, "the learner is the cap"),  # PPO CartPole, 2 agents, seen here
        (1.0, MOSTLY, "learner ranks (--learners) or a GPU faster"),
        (0.41, 0.0, "the actors wait on it 0% of theirs: the learner waits on the actors"),  # HalfCheetah
        (0.01, 0.01, "the learner waits on the actors; more actor CPUs"),  # ES CartPole, 8 agents
        (0.1, 0.8, "both wait"),
        (0.95, 0.2, "actors and learner are in balance"),  # both busy
        (1 - MOSTLY + 0.01, MOSTLY - 0.01, "actors and learner are in balance"),
    ],
)
def test_balance_says_which_side_waits_and_what_to_change(update: float | None, wait: float | None,
                                                            says: str) -> None:  # fmt: skip
    line = balance(update, wait)
    assert line is not None and says in line, line
    if update is not None:
        assert line.startswith(f"the learner updates {update:.0%} of the time"), line


def test_balance_says_nothing_before_it_is_known_or_after_the_end() -> None:
    assert balance(None) is None and balance(None, None) is None
    assert balance(0.99, done=True) is None and balance(0.5, 0.9, done=True) is None

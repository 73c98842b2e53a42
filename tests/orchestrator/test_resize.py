"""The resize rule of an experiment admitted as one unit (orchestrator/resize.py), on a recording
stand-in for a backend: the steps and their order, a learner that does not leave, a resize that an
earlier try had cut short, and what an experiment that is not queued refuses."""

from __future__ import annotations

import pytest

from surreal.orchestrator import resize
from surreal.orchestrator.launcher import LauncherError, UsageError


class Steps:
    name = "exp1"

    def __init__(self, exists: bool = True, learner_leaves_after: int = 2) -> None:
        self.exists, self.polls_left = exists, learner_leaves_after
        self.done: list[str] = []

    def begin(self) -> bool:
        self.done.append("begin")
        return self.exists

    def suspend(self) -> None:
        self.done.append("suspend")

    def learner_pods(self) -> list[str]:
        self.done.append("look")
        self.polls_left -= 1
        return ["exp1-learner-0-abcde"] if self.polls_left >= 0 else []

    def remake(self) -> None:
        self.done.append("remake")

    def end(self) -> None:
        self.done.append("end")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_suspended_then_made_again_only_once_no_learner_is_left() -> None:
    steps, clock = Steps(learner_leaves_after=2), Clock()
    resize.resize(steps, stop_seconds=10, poll_seconds=1, clock=clock, sleep=clock.sleep)
    assert steps.done == ["begin", "suspend", "look", "look", "look", "remake", "end"]


def test_a_learner_that_does_not_leave_stops_the_resize_before_anything_is_removed() -> None:
    steps, clock = Steps(learner_leaves_after=1000), Clock()
    with pytest.raises(LauncherError, match=r"learner pod exp1-learner-0-abcde is still there after 5 s; "
                       r"`surreal scale` again finishes the resize"):  # fmt: skip
        resize.resize(steps, stop_seconds=5, poll_seconds=1, clock=clock, sleep=clock.sleep)
    assert "remake" not in steps.done and "end" not in steps.done


def test_again_after_the_unit_was_removed_it_is_made_without_suspending() -> None:
    steps = Steps(exists=False)
    resize.resize(steps, stop_seconds=5, poll_seconds=1)
    assert steps.done == ["begin", "remake", "end"]


class InPlaceSteps:
    """A backend whose learner takes the count at its second look, and whose actors run at theirs."""

    name, learner_pods = "exp1", 1

    def __init__(self, problem: str | None = None) -> None:
        self.bad, self.done = problem, []
        self.looks = {"learner": 0, "actors": 0}

    def problem(self, agents: int) -> str | None:
        self.done.append("check")
        return self.bad

    def not_running(self) -> str | None:
        self.done.append("running?")
        return None

    def tell_learner(self, agents: int) -> None:
        self.done.append(f"tell {agents}")

    def learner_took(self, agents: int) -> bool:
        self.looks["learner"] += 1
        self.done.append("learner?")
        return self.looks["learner"] >= 2

    def resize_actors(self, agents: int) -> str:
        self.done.append(f"actors {agents}")
        return f"{agents} actor pods"

    def actors_run(self, agents: int) -> bool:
        self.looks["actors"] += 1
        self.done.append("actors?")
        return self.looks["actors"] >= 2


def test_in_place_the_learner_takes_the_count_before_any_actor_changes() -> None:
    steps = InPlaceSteps()
    assert resize.scale_in_place(steps, 4, None) == "experiment 'exp1': 4 agents in 4 actor pods"
    assert steps.done == [
        "check",
        "running?",
        "tell 4",
        "learner?",
        "learner?",
        "actors 4",
        "actors?",
        "actors?",
    ]
    assert resize.scale_in_place(InPlaceSteps(), 4, 1).startswith("experiment 'exp1': 4 agents")


def test_in_place_refuses_another_count_of_learner_pods_or_a_bad_split_before_anything_changes() -> None:
    steps = InPlaceSteps()
    with pytest.raises(UsageError, match=r"--learner-pods resizes only an experiment admitted as one unit"):
        resize.scale_in_place(steps, 4, 3)
    bad = InPlaceSteps(problem="a worker of 5,000 agents would step 5,000 environments")
    with pytest.raises(UsageError, match=r"^experiment 'exp1': a worker of 5,000 agents"):
        resize.scale_in_place(bad, 5000, None)
    assert steps.done == [] and bad.done == ["check"]


def test_in_place_names_what_it_waited_for_when_it_never_comes() -> None:
    steps = InPlaceSteps()
    steps.learner_took = lambda agents: False  # type: ignore[method-assign]
    with pytest.raises(
        LauncherError, match=r"timed out after 0 s waiting for the learner of 'exp1' to take 4"
    ):
        resize.scale_in_place(steps, 4, None, timeout=0.3)
    assert "actors 4" not in steps.done

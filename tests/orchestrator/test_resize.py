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


def test_in_place_scaling_refuses_another_count_of_learner_pods() -> None:
    resize.check_in_place("exp1", None, 2)
    resize.check_in_place("exp1", 2, 2)
    with pytest.raises(UsageError, match=r"--learner-pods resizes only an experiment admitted as one unit"):
        resize.check_in_place("exp1", 3, 1)

"""The progress deadline's rule (runtime/deadline.Progress) and the hooks' checks (runtime/hooks.py),
on a clock and values given here: the runs they end are tests/integration/test_untrained.py."""

from __future__ import annotations

import math

import pytest
import torch

from surreal.algorithms.ppo import PPO
from surreal.runtime import hooks
from surreal.runtime.deadline import Progress
from surreal.runtime.exits import EXIT_ALGORITHM_FAILED
from surreal.runtime.run import RoleFailed


def test_a_run_that_moves_never_stalls_and_one_that_stops_is_named() -> None:
    p = Progress(deadline=10.0)
    p.note(0, 0, now=0.0)
    for t in range(1, 100):  # a step and an update every second
        p.note(t, t, now=float(t))
        assert p.problem(float(t)) is None
    p.note(99, 99, now=120.0)  # nothing moved since t=99
    assert p.problem(109.0) is None
    assert "no env step was counted and no update applied for 11 s" in (p.problem(110.0) or "")


def test_steps_without_updates_and_updates_without_steps_are_told_apart() -> None:
    skipped = Progress(deadline=5.0)
    skipped.note(0, 0, now=0.0)
    for t in range(1, 8):
        skipped.note(100 * t, 0, now=float(t))  # env steps flow; every update skipped
    assert (skipped.problem(7.0) or "").startswith("no update was applied for 7 s")
    refused = Progress(deadline=5.0)
    refused.note(0, 0, now=0.0)
    for t in range(1, 8):
        refused.note(0, t, now=float(t))  # updates on old rows; no new env step counted
    assert (refused.problem(7.0) or "").startswith("no env step was counted for 7 s")


@pytest.mark.parametrize(
    ("stats", "said"),
    [
        (None, "returned NoneType, not a dict"),
        ([1.0], "returned list, not a dict"),
        ({"loss": "low"}, "statistic 'loss' as a str"),
        ({"loss": torch.zeros(3)}, "statistic 'loss' as a Tensor of shape (3,)"),
        ({"ok": True}, "statistic 'ok' as a bool"),
    ],
)
def test_statistics_that_are_not_numbers_fail_the_role_naming_the_hook(stats: object, said: str) -> None:
    with pytest.raises(RoleFailed) as err:
        hooks.statistics(PPO(), "update", stats)
    assert err.value.code == EXIT_ALGORITHM_FAILED and said in str(err.value)
    assert str(err.value).startswith("algorithm 'ppo': its update returned")


def test_numbers_and_one_element_tensors_are_statistics() -> None:
    stats = {"a": 1, "b": 2.5, "c": torch.tensor(3.0), "d": torch.ones(1), "e": math.nan}
    assert hooks.statistics(PPO(), "update", stats) is stats


def test_what_a_hook_raises_is_the_algorithms_but_the_runtimes_own_errors_pass() -> None:
    def boom() -> None:
        raise KeyError("w")

    with pytest.raises(RoleFailed, match=r"algorithm 'ppo': its update raised KeyError: 'w'"):
        hooks.call(PPO(), "update", boom)
    with pytest.raises(RoleFailed, match=r"its update raised SystemExit: 0"):
        hooks.call(PPO(), "update", lambda: exit(0))
    with pytest.raises(KeyboardInterrupt):
        hooks.call(PPO(), "update", lambda: (_ for _ in ()).throw(KeyboardInterrupt()))

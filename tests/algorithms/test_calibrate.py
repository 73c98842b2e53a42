"""The calibration (runtime/calibrate.py): what one actor process makes and one learner consumes,
measured with the run's own code. Rates are this machine's, so the tests hold what cannot depend
on its speed: an update that takes at least a known time bounds the learner's rate from above."""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import pytest

from surreal.algorithms.dqn import DQN
from surreal.algorithms.ppo import PPO
from surreal.algorithms.registry import get_algorithm
from surreal.runtime.calibrate import Rates, timed

SLOW = 0.05  # seconds each update of a slow algorithm takes at least


class SlowPPO(PPO):
    def update(self, net: Any, optimizer: Any, batch: Any, cfg: Any, reduce: Any) -> dict[str, Any]:
        time.sleep(SLOW)
        return super().update(net, optimizer, batch, cfg, reduce)


class SlowDQN(DQN):
    def update(self, nets: Any, batch: Any, cfg: Any) -> dict[str, Any]:
        time.sleep(SLOW)
        return super().update(nets, batch, cfg)


def small(algo: Any, env: str, **settings: Any) -> Any:
    return dataclasses.replace(algo.preset(env, 2), hidden_sizes=(16,), **settings)


@pytest.mark.parametrize("algo", [PPO(), SlowPPO()], ids=["ppo", "slow"])
def test_an_on_policy_calibration_measures_its_actor_and_its_learner(algo: PPO) -> None:
    cfg = small(algo, "CartPole-v1", steps_per_update=256, minibatch_size=128, epochs=2)
    rates = algo.calibrate(cfg, "CartPole-v1", 4, budget=0.1)
    assert isinstance(rates, Rates) and rates.agents_in_worker == 4
    assert all(
        math.isfinite(r) and r > 0 for r in (rates.actor_steps_per_second, rates.learner_steps_per_second)
    )
    assert rates.actor_cpus(2) == pytest.approx(
        2 * rates.learner_steps_per_second / rates.actor_steps_per_second
    )
    if isinstance(algo, SlowPPO):  # one update of 256 steps takes at least SLOW
        assert rates.learner_steps_per_second <= 256 / SLOW


@pytest.mark.parametrize("algo", [DQN(), SlowDQN()], ids=["dqn", "slow"])
def test_an_off_policy_learner_consumes_a_batch_over_the_replay_ratio_per_update(algo: DQN) -> None:
    cfg = small(algo, "CartPole-v1", batch_size=32, replay_ratio=4.0)
    rates = algo.calibrate(cfg, "CartPole-v1", 2, budget=0.1)
    assert rates.actor_steps_per_second > 0 and rates.learner_steps_per_second > 0
    if isinstance(algo, SlowDQN):  # 32 rows trained per update, 4 per env step: 8 env steps
        assert rates.learner_steps_per_second <= 8 / SLOW


def test_an_algorithm_that_cannot_say_calibrates_to_none() -> None:
    es = get_algorithm("es")
    assert es.calibrate(es.preset("CartPole-v1", 2), "CartPole-v1", 2) is None


def test_timed_calls_once_untimed_then_while_the_budget_lasts() -> None:
    calls = []
    assert timed(lambda: calls.append(1), 0.05) >= 0 and len(calls) >= 2  # at least one timed call
    calls.clear()  # a first call that takes the budget is the answer: a create never waits twice
    assert timed(lambda: calls.append(time.sleep(0.02)), 0.01) >= 0.02 and len(calls) == 1


def test_the_callers_torch_threads_are_left_as_they_were() -> None:
    import torch

    before = torch.get_num_threads()
    algo = DQN()
    algo.calibrate(small(algo, "CartPole-v1", learner_threads=1 if before > 1 else 2), "CartPole-v1", 1, 0.0)
    assert torch.get_num_threads() == before

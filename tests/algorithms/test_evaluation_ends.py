"""Evaluation that ends and tells the truth (issue 38): an environment without a time limit gets one
at create, said in a line; an evaluation is a mean with its standard error over enough episodes."""

from __future__ import annotations

import numpy as np
import pytest

from surreal.protocol.types import EvalReport
from surreal.runtime.envs.make import EnvBatch, make_env
from surreal.runtime.evaluator import evaluate
from surreal.runtime.progress import LearnerProgress
from surreal.spec import DEFAULT_MAX_EPISODE_STEPS, build_spec, notes


def test_an_environment_without_a_time_limit_gets_one_at_create_and_says_so() -> None:
    """CliffWalking has no time limit: a deterministic policy that walks into a wall never ends an
    episode, and the run sat 380 s after its last step waiting for the evaluator's."""
    spec = build_spec("c", flags={"algo": "ppo", "env": "CliffWalking-v1"})
    assert spec.env_kwargs == {"max_episode_steps": DEFAULT_MAX_EPISODE_STEPS}
    assert spec.resolved is not None and spec.resolved.time_limit is None
    assert spec.resolved.env_kwargs == spec.env_kwargs  # what every component makes
    assert notes(spec) == [
        "'CliffWalking-v1' has no time limit of its own: its episodes end after 10,000 steps "
        "(--set max_episode_steps=N for another)"
    ]
    env = make_env(spec.env_ref, seed=0)
    assert env.spec is not None and env.spec.max_episode_steps == DEFAULT_MAX_EPISODE_STEPS
    env.close()
    chosen = build_spec(
        "c", flags={"algo": "ppo", "env": "CliffWalking-v1"}, overrides={"max_episode_steps": "50"}
    )
    assert chosen.env_kwargs == {"max_episode_steps": 50}
    cartpole = build_spec("c", flags={"algo": "ppo", "env": "CartPole-v1"})  # its own: 500
    assert cartpole.env_kwargs == {} and cartpole.resolved is not None and cartpole.resolved.time_limit == 500
    assert notes(cartpole) == []


def test_a_policy_that_never_reaches_the_goal_is_evaluated_all_the_same() -> None:
    spec = build_spec(
        "c", flags={"algo": "ppo", "env": "CliffWalking-v1"}, overrides={"max_episode_steps": "50"}
    )
    envs = EnvBatch(spec.env_ref, 4, seed=0, training=False)
    result = evaluate(envs, lambda obs: np.zeros(4, np.int64))  # always up: into the wall
    envs.close()
    assert result.mean_length == 50 and result.mean_return == -50 and result.episodes == 4 * 25


class _Progress(LearnerProgress):
    recent_returns = 1

    def __init__(self) -> None:
        from collections import deque

        from surreal.runtime.onpolicy.learner import Counters

        self.counters, self.train_returns, self._tb = Counters(), deque(), None
        self._init_progress()

    @property
    def done(self) -> bool:
        return False


@pytest.mark.parametrize(("std", "episodes", "stderr"), [(0.95, 10, 0.95 / 3), (0.95, 1000, 0.95 / 999**0.5)])
def test_status_gives_the_evaluations_standard_error_and_episodes(
    std: float, episodes: int, stderr: float
) -> None:
    progress = _Progress()
    progress.record_eval(EvalReport(1, 100, 0.8, std, episodes, 1.5))
    status = progress.contract_status(dropped=0, connected_actors=0)
    assert (status["eval_return"], status["eval_episodes"]) == (0.8, episodes)
    assert status["eval_stderr"] == pytest.approx(stderr)

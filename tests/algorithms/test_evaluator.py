"""Deterministic evaluation and when the evaluator evaluates."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import test_envs  # noqa: F401  (registers SurrealTestCountdown-v0)

from surreal.algorithms.common.envs import EnvBatch
from surreal.algorithms.common.evaluator import evaluate, should_evaluate
from surreal.algorithms.common.run import progress_extras
from surreal.protocol.types import Params

assert "SurrealTestCountdown-v0" in gym.registry


def params(version: int, env_steps: int, done: bool = False) -> Params:
    return Params(version, {}, progress_extras(env_steps, done))


def test_evaluate_runs_one_episode_per_env():
    envs = EnvBatch("SurrealTestCountdown-v0", 3, seed=0)
    # env i terminates at step i + 1 (action 1); returns 1, 1 + 2, 1 + 2 + 3 (the last truncates)
    t = {"step": 0}

    def policy(obs: np.ndarray) -> np.ndarray:
        t["step"] += 1
        return (np.arange(3) + 1 == t["step"]).astype(np.int64)

    result = evaluate(envs, policy)
    assert result.episodes == 3
    assert result.mean_return == (1 + 3 + 6) / 3
    assert result.mean_length == 2.0
    assert result.std_return == np.std([1, 3, 6])


def test_should_evaluate_every_interval_and_always_the_final_version():
    assert not should_evaluate(params(3, 900), last_version=None, last_steps=0, eval_interval=1000)
    assert should_evaluate(params(3, 1000), last_version=None, last_steps=0, eval_interval=1000)
    assert not should_evaluate(params(4, 1500), last_version=3, last_steps=1000, eval_interval=1000)
    assert should_evaluate(params(5, 1500, done=True), 3, 1000, 1000)
    assert not should_evaluate(params(5, 1500, done=True), 5, 1500, 1000)  # already evaluated

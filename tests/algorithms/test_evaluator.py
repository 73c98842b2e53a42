"""Deterministic evaluation and when the evaluator evaluates."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import test_envs  # noqa: F401  (registers SurrealTestCountdown-v0)

from surreal.protocol.types import EvalReport, Params
from surreal.runtime import evaluator
from surreal.runtime.envs.make import EnvBatch
from surreal.runtime.evaluator import evaluate, should_evaluate
from surreal.runtime.run import RunContext, progress_extras

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

    result = evaluate(envs, policy, min_steps=0)
    assert result.episodes == 3
    assert result.mean_return == (1 + 3 + 6) / 3
    assert result.mean_length == 2.0
    assert result.std_return == np.std([1, 3, 6])


def test_cheap_episodes_are_played_until_the_evaluation_has_its_steps():
    """Blackjack's hands are 1-2 steps: ten of them judged a policy whose return over 2,000 fresh
    hands is -0.075 +- 0.021 at 0.8 (issue 38). Every env plays the same number of episodes, as
    many as make EVAL_MIN_STEPS steps by the first ones' length, at most MAX_EVAL_EPISODES."""
    envs = EnvBatch("Blackjack-v1", 10, seed=0, training=False)
    result = evaluate(envs, lambda obs: np.zeros(len(next(iter(obs.values()))), np.int64))  # always stick
    assert result.episodes == 1000  # ceil(5000 / (10 x 1)) = 500 each, capped at 1000 in all
    assert result.mean_length == 1.0
    stderr = result.std_return / (result.episodes - 1) ** 0.5
    assert stderr < 0.04, stderr  # against ~0.3 over 10 hands
    cartpole = EnvBatch("CartPole-v1", 10, seed=0, training=False)
    balanced = evaluate(cartpole, lambda obs: (obs[:, 2] + obs[:, 3] > 0).astype(np.int64))
    assert balanced.episodes == 10 and balanced.mean_length == 500.0  # ten long episodes are enough


def test_should_evaluate_every_interval_and_always_the_final_version():
    assert not should_evaluate(params(3, 900), last_version=None, last_steps=0, eval_interval=1000)
    assert should_evaluate(params(3, 1000), last_version=None, last_steps=0, eval_interval=1000)
    assert not should_evaluate(params(4, 1500), last_version=3, last_steps=1000, eval_interval=1000)
    assert should_evaluate(params(5, 1500, done=True), 3, 1000, 1000)
    assert not should_evaluate(params(5, 1500, done=True), 5, 1500, 1000)  # already evaluated


@dataclass
class _Settings:
    eval_interval: int = 1000
    eval_episodes: int = 2


class _LearnerThatStopsAfterTheFinalReport:
    """A LearnerClient stand-in: version 1 at 1,000 steps, then the final version 2; once the
    final report is in, the learner is gone and any further call is a failure of the test."""

    def __init__(self) -> None:
        self.polls = 0
        self.reports: list[EvalReport] = []

    def get_params(self, version: int, timeout: float, role: str) -> Params | None:
        if self.reports and self.reports[-1].policy_version == 2:
            raise AssertionError("the evaluator polled after reporting the final version")
        self.polls += 1
        latest = params(1, 1000) if self.polls < 3 else params(2, 1500, done=True)
        return None if latest.version == version else latest

    def report_eval(self, report: EvalReport) -> None:
        self.reports.append(report)

    def close(self) -> None:
        pass


def test_evaluator_exits_once_the_final_version_is_reported(monkeypatch):
    learner = _LearnerThatStopsAfterTheFinalReport()
    monkeypatch.setattr(evaluator, "LearnerClient", lambda addr, token: learner)
    ctx = RunContext("SurrealTestCountdown-v0", 0, 1500, 1, Path("."), "127.0.0.1:1", "t")
    policy = lambda p: lambda obs: np.zeros(len(obs), np.int64)  # noqa: E731
    assert evaluator.run_evaluator(_Settings(), ctx, policy, poll_seconds=0.01) == 0
    reports = [(r.policy_version, r.env_steps, r.episodes) for r in learner.reports]
    assert reports == [(1, 1000, 1000), (2, 1500, 1000)]  # 1-step episodes: played up to the cap

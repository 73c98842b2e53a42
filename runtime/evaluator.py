"""Deterministic evaluation of published policies, for any algorithm that can turn Params into a
policy. The evaluator role polls the learner, evaluates a version whenever one at least
`eval_interval` env steps past the last evaluated one is out (and always the final one), and
reports the result to the learner.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Protocol

import numpy as np

from surreal.protocol.client import LearnerClient, ProtocolError
from surreal.protocol.server import EVALUATOR_ROLE
from surreal.protocol.types import EvalReport, Params
from surreal.runtime.bounds import MAX_EVAL_EPISODES
from surreal.runtime.envs.make import EnvBatch, Obs
from surreal.runtime.exits import EXIT_LEARNER_GONE
from surreal.runtime.reconnect import GIVE_UP_SECONDS  # a worker's bound, the evaluator's too
from surreal.runtime.run import RunContext, extras_done, extras_env_steps

log = logging.getLogger(__name__)

Policy = Callable[[Obs], np.ndarray]  # raw observations [N, ...] (or leaf arrays) -> actions [N, ...]
PolicyFactory = Callable[[Params], Policy]
# A checkpoint's policy (each algorithm's evaluator.checkpoint_policy): raw observations [N, ...] and
# whether to take the mode -> actions [N, ...].
TrainedAct = Callable[[Obs, bool], np.ndarray]
# The longest a live evaluator goes without a call to the learner: it asks for parameters every
# `poll_seconds` (0.5) while it waits for a version, every FAILED_POLL_SECONDS while the learner
# does not answer, and every HEARTBEAT_SECONDS during an evaluation (which may take minutes). At
# the end the learner waits for its report only while it hears from it (serving.evaluator_alive).
HEARTBEAT_SECONDS = 5.0
FAILED_POLL_SECONDS = 2.0
# An evaluator that has seen the final version and then cannot reach the learner this long is
# done: the learner stops serving only once the run has ended (with this evaluator's report, or,
# when none came in time, with its own evaluation of the final version; serving.finish).
AFTER_FINAL_SECONDS = 10.0
# An evaluation plays at least this many env steps in all (evaluate): ten CartPole or MuJoCo
# episodes already do; cheaper episodes are played more often, up to MAX_EVAL_EPISODES.
EVAL_MIN_STEPS = 5_000


def eval_seed(seed: int) -> int:
    """The first env seed of a run's evaluation episodes (the evaluator's and the learner's own
    final one): apart from every actor's (run.py's actor seeds)."""
    return seed * 1_000_003 + 7


class EvalSettings(Protocol):
    """What the evaluator reads from an algorithm's (frozen, so read-only) config."""

    @property
    def eval_interval(self) -> int: ...  # env steps between evaluations

    @property
    def eval_episodes(self) -> int: ...  # episodes per evaluation


@dataclass(frozen=True)
class EvalResult:
    mean_return: float
    std_return: float
    mean_length: float
    episodes: int

    def report(self, policy_version: int, env_steps: int) -> EvalReport:
        return EvalReport(policy_version=policy_version, env_steps=env_steps, **asdict(self))


def evaluate(
    envs: EnvBatch,
    policy: Policy,
    on_step: Callable[[], None] | None = None,
    *,
    min_steps: int = EVAL_MIN_STEPS,
) -> EvalResult:
    """Run `envs` (in lockstep, one policy call per step) until each has played the same number
    of episodes: one, or as many as make `min_steps` env steps in all by the first episodes'
    length (at most MAX_EVAL_EPISODES in all), so that a cheap stochastic task (Blackjack: a hand
    is 1-2 steps) is not judged on a handful of episodes. Each env's first episodes count, whatever
    they return. `on_step` is called after each step."""
    n = envs.num_envs
    returns: list[list[float]] = [[] for _ in range(n)]
    lengths: list[list[int]] = [[] for _ in range(n)]
    each: int | None = None  # episodes each env plays, once every env has ended its first
    obs = envs.reset()
    while each is None or min(len(r) for r in returns) < each:
        if on_step is not None:
            on_step()
        res = envs.step(policy(obs))
        obs = res.obs
        if res.episode_returns:
            ended = np.flatnonzero(res.terminated | res.truncated)
            for i, ret, length in zip(ended, res.episode_returns, res.episode_lengths, strict=True):
                returns[i].append(ret)
                lengths[i].append(length)
            if each is None and all(returns):
                first = float(np.mean([ls[0] for ls in lengths]))
                each = int(min(max(1, math.ceil(min_steps / (n * first))), max(1, MAX_EVAL_EPISODES // n)))
    got = np.array([r[:each] for r in returns], np.float64).ravel()
    steps = np.array([ls[:each] for ls in lengths], np.float64)
    return EvalResult(float(got.mean()), float(got.std()), float(steps.mean()), len(got))


def should_evaluate(params: Params, last_version: int | None, last_steps: int, eval_interval: int) -> bool:
    """A new version that is final, or at least `eval_interval` env steps past the last one."""
    if params.version == last_version:
        return False
    if extras_done(params.extras):
        return True
    return extras_env_steps(params.extras) - last_steps >= eval_interval


class _Line:
    """The evaluator's calls to the learner, each saying it is the evaluator's, and when it last
    made one (time.monotonic())."""

    def __init__(self, client: LearnerClient) -> None:
        self.client = client
        self.latest: Params | None = None
        self.called_at = float("-inf")

    def fetch(self) -> Params | None:
        """The latest version published (new or not); ProtocolError and the like if unreachable."""
        self.called_at = time.monotonic()
        known = self.latest.version if self.latest else -1
        self.latest = self.client.get_params(known, timeout=10.0, role=EVALUATOR_ROLE) or self.latest
        return self.latest

    def heartbeat(self) -> None:
        """During an evaluation: a call every HEARTBEAT_SECONDS, so that the learner knows this
        evaluator is alive (what it answers is kept for the next evaluation; a failure is not
        one: the evaluation goes on)."""
        if time.monotonic() - self.called_at < HEARTBEAT_SECONDS:
            return
        try:
            self.fetch()
        except (ProtocolError, ConnectionError, TimeoutError) as e:
            log.debug("heartbeat to the learner failed: %s", e)


def run_evaluator(
    cfg: EvalSettings, ctx: RunContext, make_policy: PolicyFactory, poll_seconds: float = 0.5,
    obs_keys: tuple[str, ...] = (),
) -> int:  # fmt: skip
    """Evaluate published versions until the final one is evaluated and reported (exit 0 right
    after that report: the learner may stop serving once it has it). `obs_keys`: the observation
    keys the policy sees (EnvSpaces.keep)."""
    envs = EnvBatch(ctx.env, cfg.eval_episodes, seed=eval_seed(ctx.seed), training=False, obs_keys=obs_keys)
    client = LearnerClient(ctx.learner_for(0), ctx.token)
    line = _Line(client)
    last_version, last_steps = None, 0
    failing_since: float | None = None
    try:
        while True:
            try:
                latest = line.fetch()
                failing_since = None
            except (ProtocolError, ConnectionError, TimeoutError) as e:
                failing_since = failing_since or time.monotonic()
                final = line.latest is not None and extras_done(line.latest.extras)
                if final and time.monotonic() - failing_since > AFTER_FINAL_SECONDS:
                    log.info("the learner ended the run after its final version (%s): done", e)
                    return 0
                if time.monotonic() - failing_since > GIVE_UP_SECONDS:
                    log.error("learner unreachable, giving up: %s", e)
                    return EXIT_LEARNER_GONE
                time.sleep(FAILED_POLL_SECONDS)
                continue
            if latest is None or not should_evaluate(latest, last_version, last_steps,
                                                     cfg.eval_interval):  # fmt: skip
                time.sleep(poll_seconds)
                continue
            steps = extras_env_steps(latest.extras)
            result = evaluate(envs, make_policy(latest), on_step=line.heartbeat)
            log.info("version %d at %d steps: return %.1f", latest.version, steps, result.mean_return)
            try:
                client.report_eval(result.report(latest.version, steps))
            except (ProtocolError, ConnectionError, TimeoutError) as e:
                log.warning("could not report the evaluation of version %d: %s", latest.version, e)
                continue
            if extras_done(latest.extras):
                # Done now: the learner may stop serving as soon as it has this report.
                return 0
            last_version, last_steps = latest.version, steps
    finally:
        client.close()
        envs.close()

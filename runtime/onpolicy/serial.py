"""Serial harness: actor workers -> the learner of an on-policy algorithm in one process, no networking.

The same cores the distributed roles run, wired by direct calls, so learning tests and preset
tuning are deterministic, debuggable and bounded by env steps:

    python -m surreal.serial --env CartPole-v1 --steps 100000 --agents 2 --seed 0
    python -m surreal.serial --env FrozenLake-v1 --set env_kwargs.is_slippery=false
    python -m surreal.serial --algo examples.a2c:A2C --env CartPole-v1
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from surreal.protocol.types import Fragment
from surreal.runtime.actor import actor_seed
from surreal.runtime.envs.make import EnvBatch, spaces_for
from surreal.runtime.envs.ref import EnvRef
from surreal.runtime.evaluator import EvalResult, eval_seed, evaluate
from surreal.runtime.onpolicy.actor import Actor
from surreal.runtime.onpolicy.config import OnPolicyConfig
from surreal.runtime.onpolicy.evaluator import eval_policy
from surreal.runtime.onpolicy.learner import Learner

if TYPE_CHECKING:
    from surreal.algorithms.api import OnPolicy


@dataclass(frozen=True)
class SerialResult:
    env_steps: int
    updates: int
    final_return: float  # mean eval return of the final policy
    steps_to_threshold: int | None  # env steps of the first eval reaching the threshold
    seconds: float


def train_serial(
    cfg: OnPolicyConfig,
    env_id: EnvRef | str,
    *,
    algo: OnPolicy,
    total_steps: int,
    seed: int = 0,
    num_agents: int = 2,
    workers: int = 1,
    threshold: float | None = None,
    exp_dir: Path | None = None,
    on_eval: Callable[[int, EvalResult, Learner], None] | None = None,
) -> SerialResult:
    """Train for `total_steps` env steps; evaluate every `cfg.eval_interval` steps and at the end.

    `num_agents` logical agents are spread over `workers` actors that take turns sending one
    fragment each, like the distributed workers but in lockstep.
    """
    start = time.monotonic()
    torch.set_num_threads(cfg.learner_threads)  # one process does everything; tiny ops
    learner = Learner(
        algo, cfg, spaces_for(env_id).keep(cfg.obs_keys), total_steps, seed=seed, exp_dir=exp_dir
    )
    shares = [num_agents // workers + (i < num_agents % workers) for i in range(workers)]
    actors = [
        Actor(cfg, env_id, share * cfg.envs_per_agent, seed=actor_seed(seed, i), algo=algo)
        for i, share in enumerate(shares)
        if share > 0
    ]
    eval_envs = EnvBatch(
        env_id, cfg.eval_episodes, seed=eval_seed(seed), training=False, obs_keys=cfg.obs_keys
    )
    reached: int | None = None

    def run_eval() -> float:
        nonlocal reached
        params = learner.params()
        result = evaluate(eval_envs, eval_policy(cfg, learner.spaces, params, seed, algo))
        steps = learner.counters.env_steps
        learner.record_eval(result.report(params.version, steps))
        if reached is None and threshold is not None and result.mean_return >= threshold:
            reached = steps
        if on_eval is not None:
            on_eval(steps, result, learner)
        return result.mean_return

    params, last_eval = learner.params(), 0
    while not learner.done:
        for i, actor in enumerate(actors):
            if params.version != learner.counters.version:
                params = learner.params()
            if actor.version != params.version:
                actor.set_params(params)
            learner.add_fragment(Fragment(f"actor-{i}", actor.version, actor.collect()))
            while learner.ready():
                learner.update()
        if learner.counters.env_steps - last_eval >= cfg.eval_interval and not learner.done:
            last_eval = learner.counters.env_steps
            run_eval()
    learner.save()
    final_return = run_eval()
    for actor in actors:
        actor.close()
    eval_envs.close()
    learner.close()
    return SerialResult(
        learner.counters.env_steps, learner.counters.updates, final_return, reached,
        time.monotonic() - start,
    )  # fmt: skip

"""Serial harness: actor workers -> the learner of an on-policy algorithm in one process, no networking.

The same cores the distributed roles run, wired by direct calls, so learning tests and preset
tuning are deterministic, debuggable and bounded by env steps:

    python -m surreal.algorithms.onpolicy.serial --env CartPole-v1 --steps 100000 --agents 2 --seed 0
    python -m surreal.algorithms.onpolicy.serial --env FrozenLake-v1 --set env_kwargs.is_slippery=false
    python -m surreal.algorithms.onpolicy.serial --algo examples.a2c:A2C --env CartPole-v1
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml

from surreal.algorithms.api import OnPolicy
from surreal.algorithms.common.evaluator import EvalResult, eval_seed, evaluate
from surreal.algorithms.envs.make import EnvBatch, spaces_for
from surreal.algorithms.envs.ref import EnvRef, extend_import_path
from surreal.algorithms.onpolicy.actor import Actor, actor_seed
from surreal.algorithms.onpolicy.config import OnPolicyConfig
from surreal.algorithms.onpolicy.evaluator import eval_policy
from surreal.algorithms.onpolicy.learner import Learner
from surreal.algorithms.registry import get_algorithm
from surreal.protocol.types import Fragment


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
        Actor(cfg, env_id, share * cfg.envs_per_agent, seed=actor_seed(seed, i))
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
        result = evaluate(eval_envs, eval_policy(cfg, learner.spaces, params, seed))
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


def override(cfg: OnPolicyConfig, assignments: list[str]) -> OnPolicyConfig:
    """Apply KEY=VALUE overrides (VALUE as a Python literal, e.g. 3e-4, (64, 64), None)."""
    changes = {}
    for item in assignments:
        key, _, value = item.partition("=")
        if key not in {f.name for f in dataclasses.fields(cfg)}:
            raise SystemExit(f"unknown {cfg.section} config field {key!r}")
        try:
            changes[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            changes[key] = value  # a bare string, e.g. activation=relu
    cfg = dataclasses.replace(cfg, **changes)
    cfg.validate()
    return cfg


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algo", default="ppo", help="ppo, or MODULE:NAME (an api.OnPolicy)")
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--agents", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--threshold", type=float, default=None)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config field (a Python literal), or env_kwargs.NAME=VALUE (YAML, as "
                        "`surreal create` reads it)")  # fmt: skip
    args = parser.parse_args(argv)
    kwargs = {}
    for item in [a for a in args.set if a.startswith("env_kwargs.")]:
        key, _, value = item.partition("=")
        kwargs[key.partition(".")[2]] = yaml.safe_load(value) if value.strip() else ""
    args.set = [a for a in args.set if not a.startswith("env_kwargs.")]
    args.env = EnvRef(args.env, kwargs) if kwargs else args.env
    extend_import_path(["."])
    try:
        algo = get_algorithm(args.algo)
        if not isinstance(algo, OnPolicy):
            raise ValueError(f"{args.algo} is not an on-policy algorithm")
        cfg = override(algo.preset(args.env, args.agents), args.set)
    except ValueError as exc:  # an environment that cannot be made: one line, as the CLI says it
        raise SystemExit(f"error: {exc}") from None

    def report(steps: int, result: EvalResult, learner: Learner) -> None:
        status = learner.status()
        print(
            f"steps {steps:>9,}  eval {result.mean_return:9.4g} +- {result.std_return:7.3g}  "
            f"train {status['train_return'] or float('nan'):9.4g}  "
            f"updates {status['updates']:>5}  {status['steps_per_second']:7.0f} steps/s",
            flush=True,
        )

    result = train_serial(
        cfg, args.env, algo=algo, total_steps=args.steps, seed=args.seed, num_agents=args.agents,
        workers=args.workers, threshold=args.threshold, on_eval=report,
    )  # fmt: skip
    print(
        f"final eval {result.final_return:.4g} at {result.env_steps:,} steps; "
        f"threshold reached at {result.steps_to_threshold}; {result.seconds:.0f}s",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

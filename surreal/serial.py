"""The serial harness: one process steps the actors' environments, trains and evaluates, with no
network, for tuning an algorithm. Its settings are read as `surreal create` reads them (spec.py:
the preset, then `--set KEY=VALUE` and `env_kwargs.NAME=VALUE`, checked as create checks them):

    python -m surreal.serial --algo ppo --env CartPole-v1 --steps 100000 --set learning_rate=1e-3
"""

from __future__ import annotations

import argparse
from typing import Any

from surreal.algorithms.api import OffPolicy, OnPolicy
from surreal.algorithms.registry import get_algorithm
from surreal.runtime.envs.ref import extend_import_path
from surreal.spec import ExperimentSpec, build_spec, parse_set


def settings(argv: list[str] | None = None) -> tuple[ExperimentSpec, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algo", default="ppo", help="ppo, es, sac, td3, dqn, or MODULE:NAME")
    parser.add_argument("--env", default=None, help="the algorithm's default when not given")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--agents", type=int, default=None)
    parser.add_argument("--workers", type=int, default=1, help="actors taking turns (on-policy, ES)")
    parser.add_argument("--threshold", type=float, default=None, help="on-policy: report steps to it")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    extend_import_path(["."])
    flags = {"algo": args.algo, "env": args.env, "steps": args.steps, "seed": args.seed,
             "agents": args.agents}  # fmt: skip
    try:
        spec = build_spec("serial", flags=flags, overrides=parse_set(args.set))
    except ValueError as exc:  # what create refuses, as create says it
        raise SystemExit(f"error: {exc}") from None
    return spec, args


def main(argv: list[str] | None = None) -> int:
    spec, args = settings(argv)
    algo: Any = get_algorithm(spec.algo)
    cfg, env = spec.config, spec.env_ref
    if isinstance(algo, OnPolicy):
        from surreal.runtime.onpolicy.serial import train_serial

        def report(steps: int, result: Any, learner: Any) -> None:
            status = learner.status()
            print(f"steps {steps:>9,}  eval {result.mean_return:9.4g} +- {result.std_return:7.3g}  "
                  f"train {status['train_return'] or float('nan'):9.4g}  updates {status['updates']:>5}  "
                  f"{status['steps_per_second']:7.0f} steps/s", flush=True)  # fmt: skip

        result = train_serial(cfg, env, algo=algo, total_steps=spec.steps, seed=spec.seed,
                              num_agents=spec.agents, workers=args.workers, threshold=args.threshold,
                              on_eval=report)  # fmt: skip
        print(f"final eval {result.final_return:.4g} at {result.env_steps:,} steps; threshold reached "
              f"at {result.steps_to_threshold}; {result.seconds:.0f}s", flush=True)  # fmt: skip
    elif isinstance(algo, OffPolicy):
        from surreal.runtime.offpolicy.serial import train_serial as train_offpolicy

        ret, updates, seconds = train_offpolicy(algo, cfg, env, spec.steps, spec.seed)
        print(f"{spec.env} seed {spec.seed}: eval return {ret:.1f}, {updates} updates, {seconds:.0f} s")
    elif spec.algo == "es":
        from surreal.runtime.es.serial import train

        train(cfg, env, spec.steps, spec.agents, spec.seed, cfg.eval_interval, args.workers)
    else:
        raise SystemExit(f"error: {spec.algo} has no serial harness (on-policy, off-policy and ES have)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

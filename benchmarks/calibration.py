"""What the calibration measures (runtime/calibrate.py), and the packing it implies beside today's.

For each algorithm and environment, at `--agents` agents (the preset for that many): the env steps/s
one actor process makes with 1, 8 and 32 agents in it, the env steps/s one learner consumes, the
seconds each measurement took, and the actor CPUs that make what one learner consumes, beside what
Kubernetes asks for unsized (`--no-calibrate`: one 1-CPU actor pod per agent). `surreal create`
sizes from these measurements (orchestrator/sizing.py; the dry run's `sizing` section).

    python benchmarks/calibration.py [--agents 512] [--budget 1.0]

Shared machines are noisy: read one run's figures together.
"""

from __future__ import annotations

import argparse
import math

RUNS = (("ppo", "CartPole-v1"), ("ppo", "HalfCheetah-v5"), ("sac", "Pendulum-v1"))
PER_WORKER = (1, 8, 32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=512)
    parser.add_argument("--budget", type=float, default=1.0, help="seconds each part is timed for")
    args = parser.parse_args()

    from surreal.algorithms.registry import get_algorithm

    print(f"{'algo':<5} {'env':<15} {'agents/proc':>11} {'actor steps/s':>13} {'learner steps/s':>15} "
          f"{'actor CPUs':>10} {'unsized':>7} {'unsized/need':>12} {'took s':>6}")  # fmt: skip
    for name, env in RUNS:
        algo = get_algorithm(name)
        cfg = algo.preset(env, args.agents)
        for per_worker in PER_WORKER:
            r = algo.calibrate(cfg, env, per_worker, args.budget)
            need = max(1, math.ceil(r.actor_cpus()))
            print(f"{name:<5} {env:<15} {per_worker:>11} {r.actor_steps_per_second:>13,.0f} "
                  f"{r.learner_steps_per_second:>15,.0f} {r.actor_cpus():>10.2f} {args.agents:>7} "
                  f"{args.agents / need:>11.0f}x {r.seconds:>6.1f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()

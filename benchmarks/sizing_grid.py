"""The sized default beside a grid of hand-set packings, locally, in one sitting.

For PPO on CartPole-v1 and HalfCheetah-v5 and SAC on Pendulum-v1, at the README's 2 agents: the
packing create chooses from its measurement (orchestrator/sizing.py), then every hand-set packing
this machine can run (actor processes x agents per process, by `--agents-per-pod`; the learner's
threads, by `--set learner_threads`; these measure nothing at create). Each is a real `surreal
create` in the foreground on the local backend (bench_support.foreground_create): env steps/s
by the learner's own clock, the first moment its evaluation reached the target return, and the
balance status read at the end (`busy`: the learner's update share; `wait`: its actors' wait share).
`--repeats R` runs R rounds a seed of `--seeds`, each packing once a round, each round starting
at another packing (a drift of the machine falls on all alike), and compares medians: time to a
return depends on the trajectory a seed takes more than on the packing. Prints each run, then
the sized default's ratios to the grid's best.

    python benchmarks/sizing_grid.py [--only ppo-cartpole,ppo-halfcheetah,sac-pendulum] [--agents 2]
                                     [--repeats 3] [--seeds 0,1,2]

The sizing's claim: within 10 % of the grid's best steps/s, and no slower to the target return
than the grid's fastest. One packing's steps/s moved 11 % between two runs here: read medians.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from bench_support import foreground_create

# name -> algo, env, steps, target return
RUNS = {
    "ppo-cartpole": ("ppo", "CartPole-v1", 60_000, 475.0),
    "ppo-halfcheetah": ("ppo", "HalfCheetah-v5", 500_000, 1_000.0),
    "sac-pendulum": ("sac", "Pendulum-v1", 6_000, -200.0),
}
SIZED = "sized (default)"


def packings(algo: str, agents: int) -> list[tuple[str, list[str]]]:
    """The sized default first, then each hand-set packing: processes x agents, learner threads."""
    out: list[tuple[str, list[str]]] = [(SIZED, [])]
    for per_proc in [p for p in range(1, agents + 1) if agents % p == 0]:
        for threads in (1, 2):
            out.append((f"{agents // per_proc} proc x {per_proc}, {threads} thr",
                        ["--agents-per-pod", str(per_proc), "--no-calibrate",
                         "--set", f"{algo}.learner_threads={threads}"]))  # fmt: skip
    return out


def median(values: list[float | None]) -> float | None:
    """The median of the runs, a run that never reached the target counting as the slowest."""
    if any(v is None for v in values) and sum(v is None for v in values) * 2 >= len(values):
        return None
    return statistics.median(float("inf") if v is None else v for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(RUNS), help="comma-separated runs")
    parser.add_argument("--agents", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="rounds a seed; each packing once a round")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds, each run --repeats rounds")
    args = parser.parse_args()
    seeds = [int(x) for x in args.seeds.split(",")]
    print(f"{'run':<16} {'seed':>4} {'round':>5} {'packing':<28} {'steps/s':>9} {'to target s':>11} "
          f"{'steps':>8} {'final':>8} {'calib s':>7} {'busy':>5} {'wait':>5}")  # fmt: skip
    for name in args.only.split(","):
        algo, env, steps, target = RUNS[name]
        grid = packings(algo, args.agents)
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in grid}
        rounds = [(seed, r) for seed in seeds for r in range(args.repeats)]
        for i, (seed, round_) in enumerate(rounds):
            for label, extra in grid[i % len(grid) :] + grid[: i % len(grid)]:  # no packing always first
                flags = ["--algo", algo, "--env", env, "--agents", str(args.agents), "--seed", str(seed),
                         *extra]  # fmt: skip
                r = foreground_create(flags, steps, target)
                runs[label].append(r)
                sz = r["sizing"]
                shown = (f"sized: {sz.get('workers')} proc x {sz.get('agents_per_worker')}, "
                         f"{sz.get('learner_threads')} thr") if label == SIZED else label  # fmt: skip
                to = "-" if r["to_target_s"] is None else f"{r['to_target_s']:.1f}"
                st = "-" if r["to_target_steps"] is None else f"{r['to_target_steps']:,}"
                calib = sz.get("calibration_seconds")
                shares = (r["update_share"], r["actor_wait_share"])
                busy, wait = ("-" if x is None else f"{x:.0%}" for x in shares)
                print(f"{name:<16} {seed:>4} {round_:>5} {shown:<28} {r['rate']:>9,.0f} {to:>11} {st:>8} "
                      f"{r['eval_return']:>8.1f} {'' if calib is None else f'{calib:.1f}':>7} {busy:>5} "
                      f"{wait:>5}", flush=True)  # fmt: skip
        rate = {label: statistics.median(r["rate"] for r in rs) for label, rs in runs.items()}
        to_target = {label: median([r["to_target_s"] for r in rs]) for label, rs in runs.items()}
        best = max((label for label in rate if label != SIZED), key=rate.__getitem__)
        line = (f"{name:<16} medians of {len(rounds)} (seeds {args.seeds}): sized {rate[SIZED]:,.0f} "
                f"steps/s, best {best} {rate[best]:,.0f}: "
                f"sized / best {rate[SIZED] / rate[best]:.3f}")  # fmt: skip
        reached = {label: t for label, t in to_target.items() if label != SIZED and t is not None}
        if reached and to_target[SIZED] is not None:
            fastest = min(reached, key=reached.__getitem__)
            ratio = to_target[SIZED] / reached[fastest]
            line += (f"; to {target:g}: sized {to_target[SIZED]:.1f} s, fastest {fastest} "
                     f"{reached[fastest]:.1f} s: sized / fastest {ratio:.3f}")  # fmt: skip
        print(line, flush=True)


if __name__ == "__main__":
    main()

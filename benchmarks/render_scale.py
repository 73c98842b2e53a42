"""How the time to render an experiment's Kubernetes objects grows with its agents: linear.

For each agent count N, the spec is built as `surreal create bench --algo ppo --agents N
--backend kube` builds it (build_spec), then what `--dry-run -o yaml` does is timed, in this
process and through the functions the CLI calls: the kube launcher's `dry_run` (make_program for N
actor pods, the render to objects and its checks, the YAML stream). The program alone
(`kube_render.kube_program`) is timed beside it. Each count is timed `--repeats` times, best kept,
except counts of 50,000 agents and more, timed once. Then the ratio of each count's time to the
previous one's, beside the ratio of the counts: a linear path takes about as many times longer as
it has agents (10k/1k and 100k/10k about 10x); a quadratic one about 100x.

    python benchmarks/render_scale.py [--agents 1000,10000,100000] [--repeats 3]

The same as `time surreal create x --algo ppo --agents N --backend kube --dry-run -o yaml`, less
the interpreter's start and the imports (about 0.7 s here), which do not grow with N.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ONCE_FROM = 50_000  # agents from which one timing is kept (each takes seconds)


def best_of(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """The shortest of `repeats` timed calls of `fn`, and what the last call returned."""
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def short(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="1000,10000,100000", help="agent counts, comma-separated")
    parser.add_argument("--repeats", type=int, default=3, help=f"timings per count under {ONCE_FROM:,}")
    parser.add_argument("--algo", default="ppo")
    args = parser.parse_args()
    counts = [int(a) for a in args.agents.split(",")]

    from surreal.orchestrator.backends import open_launcher
    from surreal.orchestrator.kube import render as kube_render
    from surreal.orchestrator.launcher import Placement
    from surreal.spec import build_spec

    launcher = open_launcher("kube", home=Path.home())  # the CLI's `--backend kube` launcher
    rows = []
    for n in counts:
        spec = build_spec("bench", flags={"algo": args.algo, "agents": n, "backend": "kube"})
        repeats = 1 if n >= ONCE_FROM else max(1, args.repeats)
        program_s, program = best_of(lambda: kube_render.kube_program(spec), repeats)  # noqa: B023
        render_s, text = best_of(lambda: launcher.dry_run(spec, "yaml", Placement()), repeats)  # noqa: B023
        rows.append((n, render_s, program_s))
        print(f"{n:>8,} agents: render {render_s:8.3f} s (make_program {program_s:7.3f} s), "
              f"{len(program.components):,} components, {len(text):,} bytes of YAML "
              f"({'best of ' + str(repeats) if repeats > 1 else 'once'})", flush=True)  # fmt: skip
    for (n0, t0, _), (n1, t1, _) in zip(rows, rows[1:], strict=False):
        print(f"{short(n1)}/{short(n0)}: {t1 / t0:6.1f}x the time for {n1 / n0:.0f}x the agents "
              f"(linear: ~{n1 / n0:.0f}x, quadratic: ~{(n1 / n0) ** 2:.0f}x)")  # fmt: skip


if __name__ == "__main__":
    main()

"""The sized default beside a grid of hand-set packings, locally, one run each, in one sitting.

For PPO on CartPole-v1 and HalfCheetah-v5 and SAC on Pendulum-v1, at the README's 2 agents: the
packing create chooses from its measurement (orchestrator/sizing.py), then every hand-set packing
this machine can run (actor processes x agents per process, by `--agents-per-pod`; the learner's
threads, by `--set learner_threads`; these measure nothing at create). Each is a real `surreal
create` in the foreground on the local backend; its learner's status.json is sampled for the env
steps/s (between 10 % of the steps and the end, by the learner's own clock) and for the first
moment its evaluation reached the target return. Prints each run, then the sized default's
ratios to the grid's best.

    python benchmarks/sizing_grid.py [--only ppo-cartpole,ppo-halfcheetah,sac-pendulum] [--agents 2]

The sizing's claim: within 10 % of the grid's best steps/s, and no slower to the target return
than the grid's fastest. Shared machines are noisy: read one run's figures together.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# name -> algo, env, steps, target return
RUNS = {
    "ppo-cartpole": ("ppo", "CartPole-v1", 60_000, 475.0),
    "ppo-halfcheetah": ("ppo", "HalfCheetah-v5", 500_000, 1_000.0),
    "sac-pendulum": ("sac", "Pendulum-v1", 6_000, -200.0),
}


def run(algo: str, env: str, agents: int, steps: int, target: float, extra: list[str]) -> dict:
    """One `surreal create` in the foreground; its steps/s, time and steps to `target`, sizing."""
    home = Path(tempfile.mkdtemp(prefix="surreal-bench-"))
    exe = shutil.which("surreal", path=str(Path(sys.executable).parent)) or shutil.which("surreal")
    if exe is None:
        sys.exit("the surreal command is not installed (make install)")
    argv = [exe, "create", "bench", "--algo", algo, "--env", env, "--agents", str(agents),
            "--steps", str(steps), "--seed", "0", *extra]  # fmt: skip
    status_file = home / "experiments" / "bench" / "status.json"
    samples: list[tuple[float, int]] = []
    reached: tuple[float, int] | None = None
    environ = {k: v for k, v in os.environ.items() if k != "SURREAL_NO_CALIBRATE"}
    try:
        proc = subprocess.Popen(argv, env={**environ, "SURREAL_HOME": str(home)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
        while proc.poll() is None:
            time.sleep(0.25)
            try:
                status = json.loads(status_file.read_text())
            except (OSError, ValueError):
                continue
            samples.append((float(status["elapsed_seconds"]), int(status["env_steps"])))
            ret = status.get("eval_return")
            if reached is None and ret is not None and ret >= target:
                reached = (float(status["elapsed_seconds"]), int(status["env_steps"]))
        err = proc.stderr.read() if proc.stderr else ""
        if proc.returncode != 0:
            sys.exit(
                f"surreal create {' '.join(extra)} failed with exit code {proc.returncode}: {err[-500:]}"
            )
        final = json.loads(status_file.read_text())
        spec = (home / "experiments" / "bench" / "spec.yaml").read_text()
    finally:
        shutil.rmtree(home, ignore_errors=True)
    import yaml

    sizing = yaml.safe_load(spec).get("sizing") or {}
    window = [(t, s) for t, s in samples if steps * 0.1 <= s < steps] or samples
    (t0, s0), (t1, s1) = window[0], window[-1]
    return {
        "rate": (s1 - s0) / max(t1 - t0, 1e-9),
        "to_target_s": reached[0] if reached else None,
        "to_target_steps": reached[1] if reached else None,
        "eval_return": final.get("eval_return"),
        "workers": sizing.get("workers"),
        "per_worker": sizing.get("agents_per_worker"),
        "threads": sizing.get("learner_threads"),
        "calibration_s": sizing.get("calibration_seconds"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(RUNS), help="comma-separated runs")
    parser.add_argument("--agents", type=int, default=2)
    args = parser.parse_args()
    print(f"{'run':<16} {'packing':<28} {'steps/s':>9} {'to target s':>11} {'steps':>8} {'final':>8} "
          f"{'calib s':>7}")  # fmt: skip
    for name in args.only.split(","):
        algo, env, steps, target = RUNS[name]
        packings: list[tuple[str, list[str]]] = [("sized (default)", [])]
        for per_proc in sorted({p for p in range(1, args.agents + 1) if args.agents % p == 0}):
            for threads in (1, 2):
                label = f"{args.agents // per_proc} proc x {per_proc}, {threads} thr"
                packings.append((label, ["--agents-per-pod", str(per_proc), "--no-calibrate",
                                         "--set", f"{algo}.learner_threads={threads}"]))  # fmt: skip
        results = {}
        for label, extra in packings:
            r = results[label] = run(algo, env, args.agents, steps, target, extra)
            if label.startswith("sized"):
                label = f"sized: {r['workers']} proc x {r['per_worker']}, {r['threads']} thr"
            to = "-" if r["to_target_s"] is None else f"{r['to_target_s']:.1f}"
            st = "-" if r["to_target_steps"] is None else f"{r['to_target_steps']:,}"
            calib = "" if r["calibration_s"] is None else f"{r['calibration_s']:.1f}"
            print(f"{name:<16} {label:<28} {r['rate']:>9,.0f} {to:>11} {st:>8} {r['eval_return']:>8.1f} "
                  f"{calib:>7}", flush=True)  # fmt: skip
        sized = results.pop("sized (default)")
        best = max(results.values(), key=lambda r: r["rate"])
        reached = [r["to_target_s"] for r in results.values() if r["to_target_s"] is not None]
        line = f"{name:<16} sized / best steps/s {sized['rate'] / best['rate']:.3f}"
        if reached and sized["to_target_s"] is not None:
            line += f"; sized / fastest to {target:g}: {sized['to_target_s'] / min(reached):.3f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()

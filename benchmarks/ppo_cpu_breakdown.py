"""Where the CPU of a local PPO run goes: CPU time per env step of each role, over a steady window.

Runs `surreal create --algo ppo` (HalfCheetah-v5, default preset, one eval episode) in the
background, waits until `--warmup` env steps are done, then samples every component process's
CPU time (psutil) and the learner's env step count over `--seconds`. Prints steps/s, CPU us per
env step per role, and how busy the machine was: what bounds the throughput of (d) in
ppo_throughput.py. A/B a setting by running it twice, e.g. with SURREAL_PIN_ACTORS=0 and without.

    python benchmarks/ppo_cpu_breakdown.py [--steps 600000] [--set KEY=VALUE ...]
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

import psutil


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600_000, help="env steps of the run")
    parser.add_argument("--warmup", type=int, default=60_000, help="env steps before sampling")
    parser.add_argument("--seconds", type=float, default=15.0, help="length of the sampled window")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="PPO overrides")
    args = parser.parse_args()

    exe = shutil.which("surreal", path=str(Path(sys.executable).parent)) or shutil.which("surreal")
    if exe is None:
        sys.exit("the surreal command is not installed (make install)")
    home = Path(tempfile.mkdtemp(prefix="surreal-cpu-"))
    argv = [exe, "create", "cpu", "--algo", "ppo", "--env", "HalfCheetah-v5", "--agents", "2",
            "--steps", str(args.steps), "--seed", "0", "--set", "eval_episodes=1"]  # fmt: skip
    for item in args.set:
        argv += ["--set", item]
    status_file = home / "experiments" / "cpu" / "status.json"
    proc = subprocess.Popen(argv, env={**os.environ, "SURREAL_HOME": str(home)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        while _steps(status_file) < args.warmup:
            if proc.poll() is not None:
                sys.exit(f"the run ended before {args.warmup} env steps (exit code {proc.returncode})")
            time.sleep(0.2)
        children = psutil.Process(proc.pid).children(recursive=True)
        roles = {c.pid: c.cmdline()[c.cmdline().index("component") + 1] for c in children}
        before = _sample(status_file, children)
        time.sleep(args.seconds)
        after = _sample(status_file, children)
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(home, ignore_errors=True)

    steps = after["steps"] - before["steps"]
    wall = after["elapsed"] - before["elapsed"]
    per_role: dict[str, float] = {}
    for pid, role in roles.items():
        per_role[role] = per_role.get(role, 0.0) + after["cpu"][pid] - before["cpu"][pid]
    total = sum(per_role.values())
    print(f"{steps / wall:,.0f} env steps/s over {wall:.1f} s; CPU per env step {total / steps * 1e6:.1f} us")
    for role, cpu in sorted(per_role.items()):
        print(f"  {role:10s} {cpu / steps * 1e6:6.1f} us")
    print(f"machine busy: {total / wall:.2f} of {psutil.cpu_count()} cores")


def _steps(status_file: Path) -> int:
    try:
        return int(json.loads(status_file.read_text())["env_steps"])
    except (OSError, ValueError, KeyError):
        return 0


def _sample(status_file: Path, children: list[psutil.Process]) -> dict:
    """CPU seconds per process, taken right after the learner rewrites status.json (about once a
    second), with the step count and the learner's clock of that write."""
    first = status_file.read_text()
    while (text := status_file.read_text()) == first:
        time.sleep(0.01)
    status = json.loads(text)
    cpu = {c.pid: sum(c.cpu_times()[:2]) for c in children}
    return {"steps": int(status["env_steps"]), "elapsed": float(status["elapsed_seconds"]), "cpu": cpu}


if __name__ == "__main__":
    main()

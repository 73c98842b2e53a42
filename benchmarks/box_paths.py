"""The Box paths pay nothing for the other spaces: an actor's collect() and a learner's update on
HalfCheetah-v5 (a Box of vectors, Box actions) and Breakout (pixels, Discrete actions), this
checkout against a baseline commit, interleaved in one run on the same cores.

Each measurement runs in its own process: the baseline's code is `git archive`d into a temporary
folder and imported from there (its layer folders linked under a `surreal` package, as the editable
install maps them), this checkout's from the install. Rounds alternate which of baseline and
checkout goes first, so drift in the machine's load falls on both; the medians and their ratio
are printed side by side.

    python benchmarks/box_paths.py [--baseline b079e5a] [--rounds 3]

Shared machines are noisy: read the ratios of one run (within ~5% is noise here).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("protocol", "orchestrator", "provisioner", "algorithms", "runtime")
ENVS = {"HalfCheetah-v5": 2, "ALE/Breakout-v5": 2}  # env -> agents of the actor measured


def measure(env: str, agents: int, fragments: int) -> dict[str, float | str]:
    """In this process: steps/s of an actor's collect() and seconds of one learner update (the
    preset's batch), with the preset of `env` and `agents` agents."""
    import torch

    import surreal
    from surreal.algorithms.ppo import PPO
    from surreal.algorithms.ppo.presets import preset_for
    from surreal.protocol.types import Fragment
    from surreal.runtime.envs.make import spaces_for
    from surreal.runtime.onpolicy.actor import Actor
    from surreal.runtime.onpolicy.learner import Learner

    torch.set_num_threads(1)
    cfg = preset_for(env, agents)
    learner = Learner(PPO(), cfg, spaces_for(env), 10**9, seed=0)
    actor = Actor(cfg, env, agents * cfg.envs_per_agent, seed=1)
    actor.set_params(learner.params())
    actor.collect()  # warm-up: first-call costs
    seconds, steps = 0.0, 0
    for _ in range(fragments):
        start = time.perf_counter()
        fragment = actor.collect()
        seconds += time.perf_counter() - start
        steps += fragment["rewards"].size
        if not learner.ready():
            learner.add_fragment(Fragment("w0", actor.version, fragment))
    collect_rate = steps / seconds
    while not learner.ready():
        learner.add_fragment(Fragment("w0", actor.version, actor.collect()))
    start = time.perf_counter()
    learner.update()
    update_seconds = time.perf_counter() - start
    actor.close()
    return {"collect_steps_per_s": collect_rate, "update_s": update_seconds, "from": surreal.__file__}


def _baseline_tree(rev: str, into: Path) -> Path:
    """`rev`'s files under `into`/src, and a folder to put on PYTHONPATH whose `surreal` package
    maps the layer folders as the install does."""
    src = into / "src"
    src.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=True).stdout
    tar_path = into / "rev.tar"
    tar_path.write_bytes(archive)
    with tarfile.open(tar_path) as tar:
        tar.extractall(src, filter="data")
    pkg = into / "path" / "surreal"
    pkg.parent.mkdir()
    pkg.symlink_to(src / "surreal", target_is_directory=True)
    for layer in LAYERS:  # surreal/<layer> -> src/<layer>, inside the archived copy only
        (src / "surreal" / layer).symlink_to(src / layer, target_is_directory=True)
    return into / "path"


def _run_child(env: str, agents: int, fragments: int, pythonpath: str | None) -> dict[str, Any]:
    child_env = {**os.environ}
    if pythonpath is not None:
        child_env["PYTHONPATH"] = pythonpath
    args = [sys.executable, __file__, "--child", env, "--agents", str(agents), "--fragments", str(fragments)]
    out = subprocess.run(args, env=child_env, capture_output=True, text=True, check=True, cwd=ROOT.parent)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--baseline", default="b079e5a", help="the commit to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fragments", type=int, default=6)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--agents", type=int, default=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.agents, args.fragments)))
        return
    with tempfile.TemporaryDirectory(prefix="surreal-box-paths-") as tmp:
        base_path = str(_baseline_tree(args.baseline, Path(tmp)))
        results: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for r in range(args.rounds):
            for env, agents in ENVS.items():
                pair = [("baseline", base_path), ("checkout", None)]
                for who, path in pair if r % 2 == 0 else pair[::-1]:  # ABBA: neither always first
                    got = _run_child(env, agents, args.fragments, path)
                    where = Path(str(got.pop("from")))
                    expected_base = path is not None
                    assert where.is_relative_to(Path(tmp)) == expected_base, f"{who} imported {where}"
                    results.setdefault((env, who), []).append(got)
                    print(f"round {r + 1} {env:16s} {who:8s} collect {got['collect_steps_per_s']:8.0f} "
                          f"steps/s, update {got['update_s']:.2f} s", flush=True)  # fmt: skip
        print(f"\nmedians of {args.rounds} rounds (baseline {args.baseline}, checkout "
              f"{_head()}):")  # fmt: skip
        collect, update = "collect steps/s (base / now / ratio)", "update s (base / now / ratio)"
        print(f"{'env':16s} {collect:>40s} {update:>34s}")
        for env in ENVS:
            base, now = results[(env, "baseline")], results[(env, "checkout")]
            row = [env.ljust(16)]
            for key, fmt in (("collect_steps_per_s", ".0f"), ("update_s", ".3f")):
                b = statistics.median(x[key] for x in base)
                n = statistics.median(x[key] for x in now)
                row.append(f"{b:{fmt}} / {n:{fmt}} / {n / b:.3f}".rjust(38 if key.startswith("c") else 34))
            print(" ".join(row))


def _head() -> str:
    git = ["git", "-C", str(ROOT)]
    out = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    return out.stdout.strip() + ("+changes" if dirty else "")


if __name__ == "__main__":
    main()

"""How long the PPO learner takes to write (and read back) its checkpoint: for a pod's grace period.

For each case ENV:AGENTS the config is resolved as `surreal create` writes it and the learner
component reads it (build_spec, the spec file, load_spec_file, use_resolved), and a Learner is
built as `run_learner` builds it, its exp_dir a fresh directory under --dir. One real update on
real fragments (one Actor's, sent again until a batch is due) fills Adam's moments and the
normalization statistics first, unless --no-update. Then `learner.save()` (torch.save to a temp
file, fsync, os.replace) is timed --repeats times, and `load_checkpoint` as often (page cache warm).

    python benchmarks/checkpoint_write.py [--cases HalfCheetah-v5:512,ALE/Breakout-v5:2,CartPole-v1:2]
                                          [--repeats 20] [--dir /dev/shm] [--set ppo.device=cpu]

The update's time printed is the first one's (cold); benchmarks/learner_update.py times warm ones.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

CASES = "HalfCheetah-v5:512,ALE/Breakout-v5:2,CartPole-v1:2"


def filesystem(path: Path) -> str:
    """The mount holding `path`: its mount point, type and device."""
    real = os.path.realpath(path)
    mounts = [p for p in psutil.disk_partitions(all=True) if Path(real).is_relative_to(p.mountpoint)]
    if not mounts:
        return "unknown filesystem"
    m = max(mounts, key=lambda p: len(p.mountpoint))
    return f"{m.mountpoint} ({m.fstype} on {m.device})"


def build_learner(env_id: str, agents: int, exp_dir: Path, overrides: dict[str, str]) -> Any:
    """A Learner with the config and spaces a learner component of `surreal create NAME --algo
    ppo --env ENV --agents AGENTS [--set ...]` runs with (component.py, then run_learner)."""
    import torch

    from surreal.algorithms.ppo import PPO
    from surreal.runtime.envs.make import spaces_for, use_resolved
    from surreal.runtime.onpolicy.learner import Learner
    from surreal.spec import build_spec, load_spec_file

    spec_file = exp_dir / "spec.yaml"
    spec_file.write_text(build_spec("bench", flags={"algo": "ppo", "env": env_id, "agents": agents},
                                    overrides=overrides).to_yaml())  # fmt: skip
    spec = load_spec_file(spec_file)
    if spec.resolved is not None:
        use_resolved(spec.resolved)
    cfg = spec.config
    cfg.validate()
    torch.set_num_threads(cfg.learner_threads)
    return Learner(PPO(), cfg, spaces_for(spec.env_ref), spec.steps, seed=spec.seed, exp_dir=exp_dir)


def one_update(learner: Any, env_id: str, agents: int) -> float:
    """Seconds of one real update (learner_update.py's way of feeding it), optimizer state filled."""
    import torch

    from surreal.protocol.types import Fragment
    from surreal.runtime.onpolicy.actor import Actor

    cfg = learner.cfg
    actor = Actor(cfg, env_id, cfg.envs_per_agent * min(agents, 16), seed=0)
    actor.set_params(learner.params())
    fragment = actor.collect()
    actor.close()
    while not learner.ready():
        learner.add_fragment(Fragment("bench", learner.counters.version, fragment))
    start = time.perf_counter()
    assert learner.update(), "the update was skipped"
    if learner.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def times_ms(fn: Any, repeats: int) -> str:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1e3)
    return f"min {min(out):8.2f}  median {statistics.median(out):8.2f}  max {max(out):8.2f} ms"


def measure(
    env_id: str, agents: int, root: Path, repeats: int, update: bool, overrides: dict[str, str]
) -> None:
    from surreal.runtime.checkpoint import LATEST, load_checkpoint

    exp_dir = Path(tempfile.mkdtemp(prefix="surreal-ckpt-", dir=root))
    try:
        learner = build_learner(env_id, agents, exp_dir, overrides)
        cfg, ckpt_dir = learner.cfg, exp_dir / "checkpoints"
        params = sum(p.numel() for p in learner.net.parameters())
        head = (f"{env_id} {agents} agents: device {learner.device}, batch {cfg.steps_per_update:,}, "
                f"{params:,} parameters")  # fmt: skip
        if update:
            seconds = one_update(learner, env_id, agents)
            head += f", first update {seconds * 1e3:,.0f} ms (cold)"
        print(head, flush=True)
        state = learner.optimizer.state.values()
        moments = sum(t.numel() for s in state for t in s.values() if t.dim() > 0)
        print(f"    Adam moment values {moments:,}; writing to {ckpt_dir} on {filesystem(ckpt_dir.parent)}")
        learner.save()  # the first write creates the directory; not timed
        size = (ckpt_dir / LATEST).stat().st_size
        print(f"    checkpoint {size / 2**20:9.3f} MiB ({size:,} bytes)")
        print(f"    {f'save() x{repeats}':22s} {times_ms(learner.save, repeats)}", flush=True)
        loads = times_ms(lambda: load_checkpoint(ckpt_dir), repeats)
        print(f"    {f'load_checkpoint() x{repeats}':22s} {loads}", flush=True)
        learner.close()
    finally:
        shutil.rmtree(exp_dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=CASES, help="ENV:AGENTS, comma-separated")
    parser.add_argument("--repeats", type=int, default=20, help="timed saves (and loads) per case")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()),
                        help="where the experiment directories go (e.g. /dev/shm for tmpfs)")  # fmt: skip
    parser.add_argument("--no-update", action="store_true", help="save before any update (no Adam state)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="spec overrides, as surreal create's --set (e.g. ppo.device=cpu)")  # fmt: skip
    args = parser.parse_args()
    import torch

    from surreal.spec import parse_set

    overrides = parse_set(args.set)
    print(f"torch {torch.__version__}, {os.cpu_count()} cores, --dir {args.dir} on {filesystem(args.dir)}")
    for case in args.cases.split(","):
        env_id, _, agents = case.rpartition(":")
        if env_id.startswith("ALE/") and importlib.util.find_spec("ale_py") is None:
            print(f"{env_id}: ale-py is not installed here; skipped", flush=True)
            continue
        measure(env_id, int(agents), args.dir, args.repeats, not args.no_update, overrides)


if __name__ == "__main__":
    main()

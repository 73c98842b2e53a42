"""SAC side by side in one run, on the same cores, at equal replay ratio (Spreeze's measures):

(a) Stable-Baselines3 SAC with the same networks, batch, learning rate, warm-up and replay ratio
    (rows trained per env step: batch x gradient_steps / train_freq);
(b) surreal SAC through the real CLI and local backend, for each agents x shards of the grid.

For each: wall seconds of the run (the learner's elapsed time; SB3's learn()), env steps/s
(sampling), gradient updates/s and rows trained/s (update Hz), the final policy's eval return and
the replay ratio held; then surreal's wall time and rates over SB3's.

    python benchmarks/sac_throughput.py [--env Pendulum-v1] [--steps 10000] [--agents 2,4,8] \
        [--shards 1,2] [--set hidden_sizes=[64,64] --set replay_ratio=128]

Shared machines are noisy: read the ratios of one run, not absolute figures across runs.
"""

from __future__ import annotations

import argparse
import ast
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_SETS = ("hidden_sizes=[64,64]", "replay_ratio=128")  # Pendulum in about a minute a run
SURREAL = shutil.which("surreal", path=str(Path(sys.executable).parent)) or "surreal"


def surreal_run(env: str, steps: int, agents: int, shards: int, sets: list[str], seed: int) -> dict:
    home = Path(tempfile.mkdtemp(prefix="surreal-sac-bench-"))
    try:
        argv = [SURREAL, "create", "b", "--algo", "sac", "--env", env, "--steps", str(steps),
                "--seed", str(seed), "--agents", str(agents), "--replay-shards", str(shards)]  # fmt: skip
        for s in sets:
            argv += ["--set", s]
        env_vars = {"SURREAL_HOME": str(home), "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"}
        subprocess.run(argv, env=env_vars, check=True, capture_output=True, timeout=7200)
        st = json.loads(subprocess.run([SURREAL, "status", "b", "-o", "json"], env=env_vars, check=True,
                                       capture_output=True, text=True).stdout)  # fmt: skip
    finally:
        shutil.rmtree(home, ignore_errors=True)
    seconds, replay = st["elapsed_seconds"], st["replay"]
    return {"seconds": seconds, "env_steps_s": st["env_steps"] / seconds,
            "updates_s": st["updates"] / seconds,
            "rows_s": st["rows_trained"] / seconds, "eval_return": st["eval_return"],
            "ratio_held": sum(s["sampled"] for s in replay["shards"]) / max(1, st["env_steps"])}  # fmt: skip


def sb3_run(env: str, steps: int, cfg: object, seed: int) -> dict:
    import gymnasium as gym
    import torch
    from stable_baselines3 import SAC
    from stable_baselines3.common.evaluation import evaluate_policy

    torch.set_num_threads(1)
    batch, ratio = cfg.batch_size, cfg.replay_ratio  # type: ignore[attr-defined]
    train_freq, gradient_steps = (round(batch / ratio), 1) if ratio < batch else (1, round(ratio / batch))
    model = SAC("MlpPolicy", gym.make(env), learning_rate=cfg.learning_rate, batch_size=batch,  # type: ignore[attr-defined]
                buffer_size=cfg.buffer_size, learning_starts=cfg.learning_starts, tau=cfg.tau,  # type: ignore[attr-defined]
                gamma=cfg.gamma, train_freq=train_freq, gradient_steps=gradient_steps, seed=seed,  # type: ignore[attr-defined]
                policy_kwargs={"net_arch": list(cfg.hidden_sizes)}, device="cpu")  # type: ignore[attr-defined]  # fmt: skip
    started = time.perf_counter()
    model.learn(steps)
    seconds = time.perf_counter() - started
    mean, _ = evaluate_policy(model, gym.make(env), n_eval_episodes=10, deterministic=True)
    updates = model._n_updates
    return {"seconds": seconds, "env_steps_s": steps / seconds, "updates_s": updates / seconds,
            "rows_s": updates * batch / seconds, "eval_return": float(mean),
            "ratio_held": updates * batch / steps}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--agents", default="2,4,8")
    parser.add_argument("--shards", default="1,2")
    parser.add_argument("--seed", type=int, default=0)
    # Given sets replace these (argparse would append them to a default list).
    parser.add_argument("--set", action="append", help="KEY=VALUE over the preset; default: "
                        f"{' '.join(DEFAULT_SETS)}")  # fmt: skip
    args = parser.parse_args()
    args.set = args.set or list(DEFAULT_SETS)
    from dataclasses import replace

    from surreal.algorithms.registry import get_algorithm

    overrides = {k: ast.literal_eval(v) for k, v in (s.split("=", 1) for s in args.set)}
    cfg = replace(get_algorithm("sac").preset(args.env, 2), **overrides)
    print(f"{args.env}, {args.steps:,} env steps, seed {args.seed}: batch {cfg.batch_size}, replay "
          f"ratio {cfg.replay_ratio:g}, hidden {list(cfg.hidden_sizes)}, learning_starts "
          f"{cfg.learning_starts}", flush=True)  # fmt: skip
    print(f"{'run':<28}{'wall s':>8}{'steps/s':>9}{'updates/s':>10}{'rows/s':>10}{'eval':>9}{'ratio':>8}"
          f"{'wall/SB3':>10}{'upd/SB3':>9}", flush=True)  # fmt: skip
    base = sb3_run(args.env, args.steps, cfg, args.seed)
    row("SB3 SAC", base, base)  # each row as it ends: a long run (HalfCheetah) shows what it has
    for shards in (int(s) for s in args.shards.split(",")):
        for agents in (int(a) for a in args.agents.split(",")):
            figures = surreal_run(args.env, args.steps, agents, shards, args.set, args.seed)
            row(f"surreal {agents} agents {shards} shard{'s' if shards > 1 else ''}", figures, base)


def row(name: str, f: dict, base: dict) -> None:
    print(f"{name:<28}{f['seconds']:>8.0f}{f['env_steps_s']:>9.0f}{f['updates_s']:>10.0f}{f['rows_s']:>10.0f}"
          f"{f['eval_return']:>9.1f}{f['ratio_held']:>8.1f}{f['seconds'] / base['seconds']:>10.2f}"
          f"{f['updates_s'] / base['updates_s']:>9.2f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()

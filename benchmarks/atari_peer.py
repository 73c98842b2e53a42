"""Breakout with PPO: surreal against Stable-Baselines3 with CleanRL's `ppo_atari` hyperparameters.

Both train on the same Atari stack (surreal.runtime.envs.atari: no-op reset, frame skip 4 with
max-pool, FIRE reset, episodic life, clipped rewards, 84x84 gray, 4 frames) with the same settings:
8 envs x 128 steps, 4 minibatches of 256, 4 epochs, lr 2.5e-4 annealed over the run, clip 0.1,
entropy 0.01, Nature CNN. Prints the training return (the game's score, mean of the last 20 games)
of both at the same env steps, each one's env steps per second, and the ratios.

    python benchmarks/atari_peer.py [--steps 500000] [--env ALE/Breakout-v5]
    python benchmarks/atari_peer.py --surreal-home DIR --surreal-name NAME   # reuse a finished run

surreal runs through the real CLI (2 agents of 4 envs, `--set env_kwargs.repeat_action_probability=0`
as CleanRL's v4 ids); SB3 runs in this process (one torch thread, envs stepped in turn, as SB3 does).
About an hour on a 2-core machine for 500k steps each. Learning curves are noisy at this length:
read the ratio of returns with that in mind.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHECKPOINTS = (100_000, 250_000, 500_000, 1_000_000, 2_000_000)
ENV_KWARGS = {"repeat_action_probability": 0.0}


def surreal_run(env_id: str, steps: int) -> tuple[Path, str]:
    home = Path(tempfile.mkdtemp(prefix="surreal-atari-"))
    exe = shutil.which("surreal", path=str(Path(sys.executable).parent)) or shutil.which("surreal")
    if exe is None:
        sys.exit("the surreal command is not installed (make install)")
    argv = [exe, "create", "atari", "--algo", "ppo", "--env", env_id, "--agents", "2", "--steps", str(steps),
            "--seed", "1", "--set", "env_kwargs.repeat_action_probability=0"]  # fmt: skip
    subprocess.run(argv, env={**os.environ, "SURREAL_HOME": str(home)}, check=True, stdout=subprocess.DEVNULL)
    return home, "atari"


def surreal_curve(home: Path, name: str) -> tuple[list[tuple[int, float]], float]:
    """(env steps, train return) from the run's own event files, and its env steps per second."""
    from surreal.orchestrator.plot import read_local

    train = read_local(home, name).train
    rate = train.steps[-1] / max(1e-9, train.seconds[-1] - train.seconds[0])
    return list(zip(train.steps, train.values, strict=True)), rate


def sb3_curve(env_id: str, steps: int, seed: int = 1) -> tuple[list[tuple[int, float]], float]:
    import numpy as np
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import DummyVecEnv

    from surreal.runtime.envs.atari import make_atari

    torch.set_num_threads(1)
    envs = DummyVecEnv(
        [lambda i=i: make_atari(env_id, seed + i, training=True, **ENV_KWARGS) for i in range(8)]
    )
    curve: list[tuple[int, float]] = []

    class Record(BaseCallback):
        def _on_rollout_end(self) -> None:
            games = [e["r"] for e in self.model.ep_info_buffer][-20:]
            if games:
                curve.append((self.num_timesteps, float(np.mean(games))))

        def _on_step(self) -> bool:
            return True

    settings = dict(n_steps=128, batch_size=256, n_epochs=4, clip_range=0.1, ent_coef=0.01, vf_coef=0.5,
                    max_grad_norm=0.5, gamma=0.99, gae_lambda=0.95)  # fmt: skip
    model = PPO("CnnPolicy", envs, learning_rate=lambda f: 2.5e-4 * f, seed=seed, device="cpu", **settings)
    start = time.perf_counter()
    model.learn(steps, callback=Record())
    return curve, steps / (time.perf_counter() - start)


def at(curve: list[tuple[int, float]], step: int) -> float | None:
    """The last value recorded at or before `step` (None if the curve does not reach it)."""
    if not curve or curve[-1][0] < step * 0.98:
        return None
    return [v for s, v in curve if s <= step][-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="ALE/Breakout-v5")
    parser.add_argument("--steps", type=int, default=500_000)
    parser.add_argument("--surreal-home", type=Path, help="reuse this SURREAL_HOME's finished run")
    parser.add_argument("--surreal-name", default="atari")
    args = parser.parse_args()
    home, name = (
        (args.surreal_home, args.surreal_name) if args.surreal_home else surreal_run(args.env, args.steps)
    )
    ours, our_rate = surreal_curve(home, name)
    steps = min(args.steps, ours[-1][0])
    theirs, their_rate = sb3_curve(args.env, steps)
    print(f"{args.env}, PPO with CleanRL ppo_atari settings, train return (mean of the last 20 games)")
    print(f"{'env steps':>10}  {'surreal':>8}  {'SB3':>8}  ratio")
    for step in (s for s in CHECKPOINTS if s <= steps):
        a, b = at(ours, step), at(theirs, step)
        if a is not None and b is not None:
            print(f"{step:>10,}  {a:8.1f}  {b:8.1f}  {a / b if b else float('nan'):5.2f}")
    ratio = our_rate / their_rate
    print(f"env steps/s: surreal {our_rate:,.0f} (2 cores), SB3 {their_rate:,.0f}; ratio {ratio:.2f}")


if __name__ == "__main__":
    main()

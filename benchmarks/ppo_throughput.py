"""PPO throughput on HalfCheetah-v5, side by side in one run on the same cores.

(a) raw env stepping with random actions drawn up front, one process per core (raw_stepping.py, as
    in the ES bench), measured right before and right after (d) and averaged;
(b) surreal PPO with Stable-Baselines3's hyperparameters (2,048 steps per update, minibatch 64, 10 epochs,
    64x64 tanh MLPs) through the real CLI and local backend;
(c) Stable-Baselines3 PPO with the same hyperparameters (and the same obs/reward normalization);
(d) surreal PPO with the default HalfCheetah-v5 preset.
Prints the figures and the ratios (b)/(c) (target >= 3) and (d)/(a) (target >= 0.5).

    python benchmarks/ppo_throughput.py [--steps 300000] [--sb3-steps 20480]

Shared machines are noisy: read the ratios of one run, not absolute figures across runs.
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

from raw_stepping import raw_rate

ENV_ID = "HalfCheetah-v5"
SB3_EQUAL = {
    "steps_per_update": "2048",
    "minibatch_size": "64",
    "epochs": "10",
    "hidden_sizes": "64,64",
    "activation": "tanh",
    "learning_rate": "0.0003",
}


def surreal_rate(steps: int, agents: int, sets: dict[str, str]) -> dict:
    """Run `surreal create` in the foreground and sample the learner's status.json.

    The training rate is measured between 10% of the steps and the last sample before the end, so
    process start-up and the final evaluation are left out; the wall-clock rate includes them. Each
    sample is timed by the learner's own `elapsed_seconds` at the moment it wrote status.json (about
    once a second), not by when this loop happened to read it.
    """
    home = Path(tempfile.mkdtemp(prefix="surreal-bench-"))
    exe = shutil.which("surreal", path=str(Path(sys.executable).parent)) or shutil.which("surreal")
    if exe is None:
        sys.exit("the surreal command is not installed (make install)")
    argv = [exe, "create", "bench", "--algo", "ppo", "--env", ENV_ID, "--agents", str(agents),
            "--steps", str(steps), "--seed", "0", "--set", "eval_episodes=1"]  # fmt: skip
    for key, value in sets.items():
        argv += ["--set", f"{key}={value}"]
    status_file = home / "experiments" / "bench" / "status.json"
    samples: list[tuple[float, int]] = []
    try:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, env={**os.environ, "SURREAL_HOME": str(home)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        while proc.poll() is None:
            time.sleep(0.25)
            try:
                status = json.loads(status_file.read_text())
            except (OSError, ValueError):
                continue
            samples.append((float(status["elapsed_seconds"]), int(status["env_steps"])))
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            sys.exit(f"surreal create failed with exit code {proc.returncode}")
        final = json.loads(status_file.read_text())
    finally:
        shutil.rmtree(home, ignore_errors=True)
    window = [(t, s) for t, s in samples if steps * 0.1 <= s < steps]
    (t0, s0), (t1, s1) = window[0], window[-1]
    return {
        "rate": (s1 - s0) / (t1 - t0),
        "wall_rate": final["env_steps"] / wall,
        "eval_return": final["eval_return"],
    }


def sb3_rate(steps: int) -> float:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    env = VecNormalize(make_vec_env(ENV_ID, n_envs=1, seed=0))
    model = PPO(
        "MlpPolicy", env, n_steps=2048, batch_size=64, n_epochs=10, learning_rate=3e-4,
        policy_kwargs={"net_arch": {"pi": [64, 64], "vf": [64, 64]}, "activation_fn": torch.nn.Tanh},
        device="cpu", seed=0, verbose=0,
    )  # fmt: skip
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    return model.num_timesteps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300_000, help="env steps per surreal run")
    parser.add_argument("--sb3-steps", type=int, default=20_480, help="env steps for SB3")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()

    print(f"HalfCheetah-v5 on {args.cores} cores; torch threads default {os.cpu_count()}", flush=True)
    c = sb3_rate(args.sb3_steps)
    print(f"(c) Stable-Baselines3 PPO, SB3 params    {c:10,.0f} steps/s", flush=True)
    b = surreal_rate(args.steps, args.cores, SB3_EQUAL)
    print(f"(b) surreal PPO, SB3 params              {b['rate']:10,.0f} steps/s"
          f"   ({b['wall_rate']:,.0f} wall-clock incl. start-up)", flush=True)  # fmt: skip
    # (a) right before and right after (d), so that drift of a shared machine shows and averages out.
    a_before = raw_rate(ENV_ID, args.cores)
    d = surreal_rate(args.steps, args.cores, {})
    a_after = raw_rate(ENV_ID, args.cores)
    a = (a_before + a_after) / 2
    print(f"(a) raw env stepping, random actions     {a:10,.0f} steps/s"
          f"   (mean of {a_before:,.0f} before and {a_after:,.0f} after (d))", flush=True)  # fmt: skip
    print(f"(d) surreal PPO, default preset          {d['rate']:10,.0f} steps/s"
          f"   ({d['wall_rate']:,.0f} wall-clock incl. start-up)", flush=True)  # fmt: skip
    print()
    print(f"(b)/(c) surreal vs SB3, equal params     {b['rate'] / c:10.2f}   (target >= 3)")
    print(f"(d)/(a) default preset vs raw stepping   {d['rate'] / a:10.2f}   (target >= 0.5)")
    print(f"(b)/(a) SB3 params vs raw stepping       {b['rate'] / a:10.2f}")


if __name__ == "__main__":
    main()

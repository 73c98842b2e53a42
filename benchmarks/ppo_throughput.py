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
import os
import time

from bench_support import foreground_create
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
    """`surreal create` in the foreground, its learner's status.json sampled
    (bench_support.foreground_create: the training rate leaves start-up and the final evaluation
    out; the wall-clock rate includes them)."""
    args = ["--algo", "ppo", "--env", ENV_ID, "--agents", str(agents), "--seed", "0"]
    args += ["--set", "eval_episodes=1"]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    return foreground_create(args, steps)


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

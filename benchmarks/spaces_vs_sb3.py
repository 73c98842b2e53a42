"""Observations and actions beyond one Box, learned beside Stable-Baselines3 on the same steps.

For each case, surreal's serial harness (the preset `surreal create` would use) and SB3's PPO with
the same hyperparameters, read off that preset: 8 envs, the same batch (n_steps x 8 =
steps_per_update), minibatch, epochs, learning rate (annealed), gamma, lambda, clip, entropy and
normalization, 64x64 tanh MLPs, and for an image beside other keys SB3's MultiInputPolicy with a
features extractor that is surreal's small CNN trunk (cnn.py) beside the other keys. Both are
evaluated on the very same episodes: the final policy's mode over `eval_episodes` environments
seeded as surreal's evaluator seeds them.

    pip install minigrid gymnasium-robotics      # the Farama packages the cases use
    python benchmarks/spaces_vs_sb3.py [--only pointmaze,doorkey] [--seeds 0,1,2]

One training at a time (the machine's cores are shared); minutes per case and seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
import warnings
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from surreal.algorithms import ppo
from surreal.algorithms.ppo.config import PPOConfig
from surreal.algorithms.ppo.presets import preset_for
from surreal.runtime.envs.make import make_env, spaces_for
from surreal.runtime.envs.ref import EnvRef
from surreal.runtime.evaluator import eval_seed
from surreal.runtime.onpolicy.serial import train_serial


@dataclass(frozen=True)
class Case:
    name: str
    env: str
    steps: int
    kwargs: tuple[tuple[str, Any], ...] = ()
    obs_keys: tuple[str, ...] = ()


CASES = (
    Case("pointmaze", "gymnasium_robotics:PointMaze_UMazeDense-v3", 300_000),
    Case("doorkey", "minigrid:MiniGrid-DoorKey-5x5-v0", 200_000, obs_keys=("image", "direction")),
    Case("empty", "minigrid:MiniGrid-Empty-5x5-v0", 50_000, obs_keys=("image", "direction")),
    Case("frozenlake", "FrozenLake-v1", 20_000, kwargs=(("is_slippery", False),)),
    Case("frozenlake-slippery", "FrozenLake-v1", 100_000),
)


class KeysOnly(gym.ObservationWrapper):  # type: ignore[type-arg]
    """A Dict observation with only `keys` (what surreal's obs_keys does)."""

    def __init__(self, env: gym.Env, keys: tuple[str, ...]) -> None:
        super().__init__(env)
        self.keys = keys
        space = env.observation_space
        assert isinstance(space, gym.spaces.Dict)
        self.observation_space = gym.spaces.Dict({k: space[k] for k in keys})

    def observation(self, obs: dict[str, Any]) -> dict[str, Any]:
        return {k: obs[k] for k in self.keys}


def _small_combined() -> type:
    from stable_baselines3.common.preprocessing import get_flattened_obs_dim
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    class SmallCombined(BaseFeaturesExtractor):  # type: ignore[misc]
        """surreal's small CNN trunk (16 3x3/1, 32 3x3/2, Linear 512, ReLU) on the image (SB3
        scales it by 1/255 and puts channels first), the other keys flattened beside it: what
        cnn.MixedActorCritic does."""

        def __init__(self, space: gym.spaces.Dict) -> None:
            c, h, w = space["image"].shape or (0, 0, 0)
            convs = nn.Sequential(nn.Conv2d(c, 16, 3, 1, 1), nn.ReLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU(),
                                  nn.Flatten())  # fmt: skip
            with torch.no_grad():
                flat = convs(torch.zeros(1, c, h, w)).shape[1]
            self.others = [k for k in space.spaces if k != "image"]
            super().__init__(space, 512 + sum(get_flattened_obs_dim(space[k]) for k in self.others))
            self.cnn = nn.Sequential(convs, nn.Linear(flat, 512), nn.ReLU())

        def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
            return torch.cat([self.cnn(obs["image"])] + [obs[k].flatten(1) for k in self.others], dim=1)

    return SmallCombined


def sb3_run(case: Case, ref: EnvRef, cfg: PPOConfig, seed: int) -> tuple[float, float]:
    """SB3 PPO with `cfg`'s hyperparameters: the final policy's mean return on surreal's
    evaluation episodes, and the seconds of learning."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    def make(env_seed: int = 0, training: bool = True) -> gym.Env:
        env = make_env(ref, env_seed, training=training)
        return KeysOnly(env, case.obs_keys) if case.obs_keys else env

    n_envs = 2 * cfg.envs_per_agent  # surreal's 2 agents
    venv: Any = make_vec_env(make, n_envs=n_envs, seed=seed, vec_env_cls=DummyVecEnv)
    # surreal normalizes float vectors only (obs_leaves.py): SB3 the same keys.
    spaces = spaces_for(ref).keep(case.obs_keys)
    vectors = sorted({leaf.top for leaf in spaces.obs_leaves if leaf.kind == "vector"})
    norm_obs = cfg.norm_obs and (bool(vectors) if spaces.structured else not spaces.pixels)
    if norm_obs or cfg.norm_reward:
        venv = VecNormalize(venv, norm_obs=norm_obs, norm_reward=cfg.norm_reward, gamma=cfg.gamma,
                            clip_obs=cfg.obs_clip, clip_reward=cfg.reward_clip,
                            norm_obs_keys=vectors or None)  # fmt: skip
    dict_obs = isinstance(venv.observation_space, gym.spaces.Dict)
    kwargs: dict[str, Any] = {"net_arch": {"pi": list(cfg.hidden_sizes), "vf": list(cfg.hidden_sizes)},
                              "activation_fn": nn.Tanh if cfg.activation == "tanh" else nn.ReLU}  # fmt: skip
    if dict_obs and "image" in venv.observation_space.spaces:
        kwargs["features_extractor_class"] = _small_combined()
    lr = cfg.learning_rate
    model = PPO("MultiInputPolicy" if dict_obs else "MlpPolicy", venv, seed=seed, device="cpu",
                learning_rate=(lambda f: lr * f) if cfg.anneal_lr else lr,
                n_steps=cfg.steps_per_update // n_envs, batch_size=cfg.minibatch_size, n_epochs=cfg.epochs,
                gamma=cfg.gamma, gae_lambda=cfg.gae_lambda, clip_range=cfg.clip_coef, ent_coef=cfg.ent_coef,
                vf_coef=cfg.vf_coef, max_grad_norm=cfg.max_grad_norm, policy_kwargs=kwargs)  # fmt: skip
    start = time.monotonic()
    model.learn(total_timesteps=case.steps)
    seconds = time.monotonic() - start
    returns = []
    for i in range(cfg.eval_episodes):  # surreal's evaluator: env i made with eval_seed + i, reset again
        env = make(eval_seed(seed) + i, training=False)
        obs, _ = env.reset()
        done, total = False, 0.0
        while not done:
            x = venv.normalize_obs(obs) if norm_obs else obs
            action, _ = model.predict(x, deterministic=True)
            discrete = isinstance(env.action_space, gym.spaces.Discrete)
            obs, reward, terminated, truncated, _ = env.step(int(action) if discrete else action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return float(np.mean(returns)), seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default=",".join(c.name for c in CASES))
    parser.add_argument("--seeds", default="0,1,2")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)  # surreal's learner_threads; SB3 alike
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = []
    for case in (c for c in CASES if c.name in args.only.split(",")):
        ref = EnvRef(case.env, dict(case.kwargs))
        cfg = dataclasses.replace(preset_for(ref), obs_keys=case.obs_keys, eval_interval=10**12)
        ours, theirs = [], []
        for seed in seeds:
            start = time.monotonic()
            mine = train_serial(cfg, ref, algo=ppo.PPO(), total_steps=case.steps, seed=seed).final_return
            ours.append((mine, time.monotonic() - start))
            theirs.append(sb3_run(case, ref, cfg, seed))
            print(f"{case.name:20s} seed {seed}: surreal {mine:8.3f} ({ours[-1][1]:5.0f} s)   "
                  f"SB3 {theirs[-1][0]:8.3f} ({theirs[-1][1]:5.0f} s)", flush=True)  # fmt: skip
        rows.append((case, ours, theirs))
    print(f"\n{'case':20s} {'steps':>9s}  {'surreal (mean, per seed)':>34s}  {'SB3 (mean, per seed)':>34s}  "
          f"{'time SB3/surreal':>16s}")  # fmt: skip
    for case, ours, theirs in rows:

        def show(runs: list[tuple[float, float]]) -> str:
            per = " / ".join(f"{r:.3g}" for r, _ in runs)
            return f"{statistics.mean(r for r, _ in runs):.3g} ({per})"

        ratio = statistics.mean(s for _, s in theirs) / statistics.mean(s for _, s in ours)
        print(f"{case.name:20s} {case.steps:9,d}  {show(ours):>34s}  {show(theirs):>34s}  {ratio:16.2f}")


if __name__ == "__main__":
    main()

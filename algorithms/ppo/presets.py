"""Desktop-tuned PPO presets per environment (SURREAL's users asked for exactly these). What each
reaches on a 2-core machine, and the commands that measured it: docs/algorithms/ppo.md, "Results"."""

from __future__ import annotations

import dataclasses

from surreal.algorithms.api import EnvRef, ResolvedEnv, as_env_ref, resolve_env
from surreal.algorithms.ppo.config import PPOConfig
from surreal.algorithms.ppo.scaling import REFERENCE_AGENTS, scale, scale_steps

# rl-zoo's CartPole hyperparameters (8 envs x 32 steps, 20 epochs on one 256-sample minibatch,
# lambda 0.8, gamma 0.98, lr 1e-3 annealed), split over 2 agents of 4 envs.
CARTPOLE = PPOConfig(
    envs_per_agent=4,
    fragment_length=32,
    steps_per_update=256,
    minibatch_size=256,
    epochs=20,
    learning_rate=1e-3,
    gamma=0.98,
    gae_lambda=0.8,
    clip_vloss=False,
    norm_obs=False,
    norm_reward=False,
    checkpoint_every=100,
    eval_interval=10_000,
)

PENDULUM = PPOConfig(
    envs_per_agent=4,
    fragment_length=256,
    steps_per_update=2048,
    minibatch_size=256,
    epochs=10,
    learning_rate=1e-3,
    gamma=0.9,
    gae_lambda=0.95,
    eval_interval=20_000,
)

# CleanRL's MuJoCo setup (obs + reward normalization, lr 3e-4 annealed, gamma 0.99, lambda 0.95)
# shaped for throughput on a desktop. A small initial std (log_std_init -1): with -0.5 runs often
# settle in ~1,600-2,700 local optima by 1M steps. 16 envs per agent, so the policy runs on batches
# of 16 (its per-step cost is a fraction of that on 4). 4 epochs of 1,024-sample minibatches (16
# gradient steps per 4,096 env steps), so the learner costs about a quarter of what the actors cost.
# Against 10 epochs of 512 on 4 envs it learns less per env step (~3,900 against ~5,300 at 1M steps,
# 3 seeds each) at ~2x the env steps per second. 5 epochs learned about the same (3,695 / 4,045 /
# 4,184) for 10-20% more learner CPU. For sample efficiency: --set epochs=10 --set minibatch_size=512
# --set envs_per_agent=4 (see the module docstring).
HALFCHEETAH = PPOConfig(
    envs_per_agent=16,
    fragment_length=128,
    steps_per_update=4096,
    minibatch_size=1024,
    epochs=4,
    learning_rate=3e-4,
    log_std_init=-1.0,
    eval_interval=100_000,
)

# CleanRL's MuJoCo setup. Hopper gains from many small steps: with 64-sample minibatches
# (320 gradient steps per update) seed 0 reached 3,209 at 1M steps, against 1,236 with 256.
HOPPER = PPOConfig(
    envs_per_agent=4,
    fragment_length=128,
    steps_per_update=2048,
    minibatch_size=64,
    epochs=10,
    learning_rate=3e-4,
    log_std_init=-0.5,
    eval_interval=100_000,
)

# CleanRL's `ppo_atari` (8 envs x 128 steps, 4 minibatches, 4 epochs, lr 2.5e-4 annealed, clip 0.1,
# entropy 0.01, no observation or reward normalization: frames are scaled in the CNN and rewards
# clipped by the Atari wrappers), split over 2 agents of 4 envs. For every image environment; Atari
# games evaluate sampled actions (eval_deterministic, config.py).
PIXELS = PPOConfig(
    envs_per_agent=4,
    fragment_length=128,
    steps_per_update=1024,
    minibatch_size=256,
    epochs=4,
    learning_rate=2.5e-4,
    clip_coef=0.1,
    ent_coef=0.01,
    norm_obs=False,
    norm_reward=False,
    checkpoint_every=50,
    eval_interval=50_000,
)
ATARI = dataclasses.replace(PIXELS, eval_deterministic=False)
ATARI_STEPS = 10_000_000  # CleanRL's budget for ppo_atari

# MiniGrid (Farama; `pip install minigrid`): symbolic 7x7x3 grids beside a direction, sparse rewards.
# rl-zoo's MiniGrid settings (lr 2.5e-4, 4 epochs) leave the policy soft: on DoorKey-5x5 its samples
# solve the grid by 100k steps while its mode, what the evaluator plays, stalls (facing the key it
# prefers `forward` to `pickup`, forever) and scores 0. Ten epochs at lr 1e-3 sharpen it: the mode
# solves DoorKey-5x5 by 100k steps (docs/algorithms/ppo.md). Rewards are in [0, 1]: no scaling.
MINIGRID = PPOConfig(
    steps_per_update=1024,
    minibatch_size=256,
    epochs=10,
    learning_rate=1e-3,
    ent_coef=0.01,
    norm_reward=False,
)

PRESETS: dict[str, PPOConfig] = {
    "CartPole-v1": CARTPOLE,
    "Pendulum-v1": PENDULUM,
    "HalfCheetah-v5": HALFCHEETAH,
    "Hopper-v5": HOPPER,
}


# Env steps a run trains for when `--steps` is not given, for REFERENCE_AGENTS agents (scaling.py
# grows them with the batch): enough for the preset to reach the results in docs/algorithms/ppo.md.
DEFAULT_STEPS: dict[str, int] = {
    "CartPole-v1": 100_000,
    "Pendulum-v1": 200_000,
    "HalfCheetah-v5": 1_000_000,
    "Hopper-v5": 1_000_000,
}
OTHER_STEPS = 1_000_000  # CleanRL's budget for the environments without a preset


def _base(env: EnvRef | str, resolved: ResolvedEnv | None) -> tuple[PPOConfig, int]:
    """The untuned-for-agents preset of `env` and its step budget: by id, else by kind (Atari,
    MiniGrid, images; from `resolved`, the spec's; without it, from one instance built here)."""
    name = as_env_ref(env).name
    if name in PRESETS:
        return PRESETS[name], DEFAULT_STEPS[name]
    facts = resolved or resolve_env(env)
    if facts.atari:
        return ATARI, ATARI_STEPS
    if facts.entry_point.startswith("minigrid."):
        return MINIGRID, OTHER_STEPS
    if facts.pixels:
        return PIXELS, OTHER_STEPS
    return PPOConfig(), OTHER_STEPS


def preset_for(
    env_id: EnvRef | str, agents: int = REFERENCE_AGENTS, *, resolved: ResolvedEnv | None = None
) -> PPOConfig:
    """The tuned config for `env_id` (Atari's and other image environments' by kind; CleanRL-like
    defaults for the rest), scaled to `agents` agents (scaling.py)."""
    return scale(_base(env_id, resolved)[0], agents)


def default_steps(
    env_id: EnvRef | str, agents: int = REFERENCE_AGENTS, *, resolved: ResolvedEnv | None = None
) -> int:
    """The step budget of a run of `agents` agents on `env_id` when none is given."""
    base, steps = _base(env_id, resolved)
    return scale_steps(steps, base, agents)

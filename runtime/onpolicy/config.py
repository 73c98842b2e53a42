"""What the on-policy runtime reads from an algorithm's config: sampling, the batch, the optimizer,
normalization, the actor-critic network and bookkeeping. An algorithm's config is a frozen
dataclass deriving from `OnPolicyConfig` that adds its own settings (PPOConfig; A2C's in
examples/a2c.py) and their ranges (`BOUNDS`); `--set NAME=VALUE` reaches every field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from surreal.runtime import bounds
from surreal.runtime.config import FEATURES, HUGE, TINY, RunConfig
from surreal.runtime.envs.make import resolve_env, spaces_of
from surreal.runtime.envs.ref import EnvRef, ResolvedEnv


@dataclass(frozen=True)
class OnPolicyConfig(RunConfig):
    section: ClassVar[str] = "onpolicy"

    max_policy_lag: int = 4  # learner drops fragments more than this many versions old

    # --- the batch and the optimizer (learner) ---
    steps_per_update: int = 2048  # env steps (all workers) per update: the batch
    anneal_lr: bool = True
    adam_eps: float = 1e-5  # Adam epsilon (CleanRL's value; torch default 1e-8)
    max_grad_norm: float = 0.5  # global gradient norm clip
    gae_lambda: float = 0.95  # GAE lambda (1: Monte Carlo returns bootstrapped at the fragment's end)

    # --- normalization ---
    norm_obs: bool = True  # normalize observations with running statistics
    norm_reward: bool = True  # scale rewards by the running std of discounted returns
    obs_clip: float = 10.0  # clip normalized observations to [-obs_clip, obs_clip]
    reward_clip: float = 10.0  # clip scaled rewards to [-reward_clip, reward_clip]

    # --- networks (separate policy and value MLPs of RunConfig's hidden_sizes and activation) ---
    log_std_init: float = 0.0  # initial log std of the Gaussian policy (Box actions)
    ortho_init: bool = True  # orthogonal init (gain sqrt(2), 0.01 policy head, 1 value head)

    # --- bookkeeping ---
    eval_deterministic: bool = True  # evaluate the policy's mode; False: its samples (an Atari
    #   policy's argmax can stall a game for its 27k-step limit, e.g. never FIRE after a lost life)
    # --learners N: seconds the ranks have to join their group from its start (then half as long
    # again to form it); a group that misses it fails the run, naming the ranks (ranks.JOIN_TIMEOUT)
    rank_join_seconds: float = 60.0


OnPolicyConfig.BOUNDS = {
    **RunConfig.BOUNDS, "max_policy_lag": (0, 1_000_000), "steps_per_update": (1, 10_000_000),
    "adam_eps": (TINY, 1.0), "max_grad_norm": (TINY, HUGE), "gae_lambda": (0.0, 1.0),
    "obs_clip": (TINY, HUGE), "reward_clip": (TINY, HUGE), "log_std_init": (-20.0, 20.0),
    "rank_join_seconds": (1e-3, bounds.WEEK),
}  # fmt: skip


def check_config(cfg: OnPolicyConfig, env: EnvRef | str, *, resolved: ResolvedEnv | None = None) -> None:
    """Raise ValueError if `cfg` cannot train on `env`: image observations are scaled to [0, 1]
    inside the CNN, so normalizing them is refused rather than ignored."""
    facts = resolved or resolve_env(env)
    if cfg.norm_obs and facts.pixels:
        raise ValueError(f"{cfg.section}.norm_obs must be false for image observations ({env}): the CNN "
                         "scales its uint8 input itself")  # fmt: skip
    spaces = spaces_of(facts).keep(cfg.obs_keys, str(env))  # what the policy observes: every leaf encodable
    # The policy and value MLPs (on the CNN's features for images), and the update's batch.
    width = spaces.obs_dim if not spaces.has_image else FEATURES
    params = sum(bounds.mlp_parameters([width, *cfg.hidden_sizes, out]) for out in (spaces.head_dim, 1))
    row = spaces.obs_dim * (1 if spaces.has_image else 4) + 4 * spaces.action_dim + 32
    bounds.check_learner_memory(cfg.section, params, cfg.steps_per_update * row)

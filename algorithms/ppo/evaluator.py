"""The PPO policy as the evaluator runs it: mode actions on normalized observations."""

from __future__ import annotations

import numpy as np
import torch

from surreal.algorithms.common import evaluator
from surreal.algorithms.common.envs import EnvSpaces, spaces_for
from surreal.algorithms.common.normalization import ObsNormalizer
from surreal.algorithms.common.run import RunContext
from surreal.algorithms.ppo.config import PPOConfig
from surreal.algorithms.ppo.networks import ActorCritic
from surreal.protocol.types import Params


def deterministic_policy(cfg: PPOConfig, spaces: EnvSpaces, params: Params) -> evaluator.Policy:
    """Raw observations -> the policy's mode actions, with the normalization shipped in params."""
    net = ActorCritic.from_config(cfg, spaces)
    net.load_weights_numpy(params.weights)
    norm = None
    if cfg.norm_obs:
        norm = ObsNormalizer(params.extras["obs_mean"], params.extras["obs_var"], cfg.obs_clip)

    def policy(obs: np.ndarray) -> np.ndarray:
        x = norm(obs) if norm is not None else obs
        with torch.inference_mode():
            return net.act(torch.from_numpy(x), deterministic=True)[0].numpy()

    return policy


def run_evaluator(cfg: PPOConfig, ctx: RunContext) -> int:
    cfg.validate()
    torch.set_num_threads(cfg.torch_threads)
    spaces = spaces_for(ctx.env_id)
    return evaluator.run_evaluator(cfg, ctx, lambda params: deterministic_policy(cfg, spaces, params))

"""The PPO policy as the evaluator runs it: mode actions on normalized observations (in numpy)."""

from __future__ import annotations

import numpy as np

from surreal.algorithms.common import evaluator
from surreal.algorithms.common.envs import EnvSpaces, spaces_for
from surreal.algorithms.common.run import RunContext
from surreal.algorithms.ppo.config import PPOConfig
from surreal.algorithms.ppo.policy import policy_from_params
from surreal.protocol.types import Params


def deterministic_policy(cfg: PPOConfig, spaces: EnvSpaces, params: Params) -> evaluator.Policy:
    """Raw observations -> the policy's mode actions, with the normalization shipped in params."""
    net, norm = policy_from_params(cfg, spaces, params)

    def policy(obs: np.ndarray) -> np.ndarray:
        x = norm(obs) if norm is not None else np.asarray(obs, np.float32)
        return net.act(x, deterministic=True)[0]

    return policy


def run_evaluator(cfg: PPOConfig, ctx: RunContext) -> int:
    cfg.validate()
    spaces = spaces_for(ctx.env_id)
    return evaluator.run_evaluator(cfg, ctx, lambda params: deterministic_policy(cfg, spaces, params))

"""The PPO policy as the evaluator runs it: mode actions (or samples, `eval_deterministic=False`)
on normalized observations."""

from __future__ import annotations

import numpy as np

from surreal.algorithms.common import evaluator
from surreal.algorithms.common.envs import EnvSpaces, spaces_for
from surreal.algorithms.common.run import RunContext
from surreal.algorithms.ppo.config import PPOConfig
from surreal.algorithms.ppo.policy import policy_from_params
from surreal.protocol.types import Params


def eval_policy(cfg: PPOConfig, spaces: EnvSpaces, params: Params, seed: int = 0) -> evaluator.Policy:
    """Raw observations -> the policy's mode actions (or samples), with the normalization shipped
    in params. Sampling evaluations draw from a generator seeded by `seed` and the version."""
    rng = None if cfg.eval_deterministic else np.random.default_rng([seed, params.version])
    net, norm = policy_from_params(cfg, spaces, params, rng)

    def policy(obs: np.ndarray) -> np.ndarray:
        x = norm(obs) if norm is not None else obs
        return net.act(x, deterministic=cfg.eval_deterministic)[0]

    return policy


def run_evaluator(cfg: PPOConfig, ctx: RunContext) -> int:
    cfg.validate()
    spaces = spaces_for(ctx.env)
    return evaluator.run_evaluator(cfg, ctx, lambda params: eval_policy(cfg, spaces, params, ctx.seed))

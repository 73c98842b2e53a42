"""The policy as the evaluator runs it: mode actions (or samples, `eval_deterministic=False`) on
normalized observations."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from surreal.protocol.types import Params
from surreal.runtime import evaluator
from surreal.runtime.envs.make import EnvSpaces, Obs, spaces_for
from surreal.runtime.normalization import RunningMeanStd
from surreal.runtime.onpolicy.config import OnPolicyConfig
from surreal.runtime.onpolicy.policy import policy_from_params, policy_input
from surreal.runtime.run import RunContext

if TYPE_CHECKING:
    from surreal.algorithms.api import OnPolicy


def eval_policy(
    cfg: OnPolicyConfig, spaces: EnvSpaces, params: Params, seed: int = 0, algo: OnPolicy | None = None
) -> evaluator.Policy:
    """Raw observations -> the policy's (`algo`'s) mode actions (or samples), with the
    normalization shipped in params. Sampling evaluations draw from a generator seeded by `seed`
    and the version."""
    rng = None if cfg.eval_deterministic else np.random.default_rng([seed, params.version])
    net, norm = policy_from_params(cfg, spaces, params, rng, algo)

    def policy(obs: Obs) -> np.ndarray:
        return net.act(policy_input(spaces, norm, obs), deterministic=cfg.eval_deterministic)[0]

    return policy


def checkpoint_policy(
    algo: OnPolicy, cfg: OnPolicyConfig, spaces: EnvSpaces, state: Mapping[str, Any], seed: int = 0
) -> evaluator.TrainedAct:
    """The policy a learner's checkpoint state holds (its weights and the observation statistics
    it was trained with): raw observations [N, ...] -> actions, the mode or (deterministic=False)
    samples drawn from a generator seeded by `seed`."""
    spaces = spaces.keep(cfg.obs_keys)
    stats = RunningMeanStd()
    stats.moments = RunningMeanStd.moments_from_arrays(
        {k: v.numpy() for k, v in state["normalization"].items()}, "obs"
    )
    weights = {k: v.detach().cpu().numpy() for k, v in state["model"].items()}
    params = Params(0, weights, {"obs_mean": stats.mean, "obs_var": stats.var})
    net, norm = policy_from_params(cfg, spaces, params, np.random.default_rng(seed), algo)

    def act(obs: Obs, deterministic: bool) -> np.ndarray:
        return net.act(policy_input(spaces, norm, obs), deterministic=deterministic)[0]

    return act


def run_evaluator(algo: OnPolicy, cfg: OnPolicyConfig, ctx: RunContext) -> int:
    cfg.validate()
    spaces = spaces_for(ctx.env).keep(cfg.obs_keys)
    return evaluator.run_evaluator(
        cfg, ctx, lambda params: eval_policy(cfg, spaces, params, ctx.seed, algo), obs_keys=cfg.obs_keys
    )

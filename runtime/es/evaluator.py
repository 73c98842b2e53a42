"""The ES policy as the evaluator runs it: the unperturbed parameters, deterministic actions, on
observations normalized with the statistics shipped in the same Params."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from surreal.protocol.types import Params
from surreal.runtime import evaluator
from surreal.runtime.envs.make import EnvSpaces, spaces_for
from surreal.runtime.es.config import ESConfig
from surreal.runtime.es.networks import Policy, PolicySpec
from surreal.runtime.normalization import ObsNormalizer, RunningMeanStd
from surreal.runtime.run import RunContext


def normalizer(cfg: ESConfig, params: Params) -> ObsNormalizer | None:
    """The observation normalization a version was evaluated with (None when disabled)."""
    if not cfg.norm_obs:
        return None
    return ObsNormalizer(params.extras["obs_mean"], params.extras["obs_var"], cfg.obs_clip)


def deterministic_policy(cfg: ESConfig, spaces: EnvSpaces, params: Params) -> evaluator.Policy:
    """Raw observations [N, D] -> actions of the version's unperturbed parameters."""
    policy = Policy(PolicySpec.from_config(cfg, spaces), params.weights["theta"])
    norm = normalizer(cfg, params)

    def act(obs: Any) -> np.ndarray:  # one Box: an array (ES refuses leaves at create)
        return policy.act(norm(obs) if norm is not None else obs)

    return act


def checkpoint_policy(
    cfg: ESConfig, spaces: EnvSpaces, state: Mapping[str, Any], seed: int = 0
) -> evaluator.TrainedAct:
    """The unperturbed parameters a master's checkpoint state holds, with the observation statistics
    they were trained with: raw observations [N, ...] -> actions. An ES policy has no distribution
    to sample from: `deterministic` changes nothing (and `seed` is not used)."""
    arrays = {k: v.numpy() for k, v in state["arrays"].items()}
    stats = RunningMeanStd()
    stats.moments = RunningMeanStd.moments_from_arrays(arrays, "obs")
    params = Params(0, {"theta": arrays["theta"]}, {"obs_mean": stats.mean, "obs_var": stats.var})
    policy = deterministic_policy(cfg, spaces, params)
    return lambda obs, deterministic: policy(obs)


def run_evaluator(cfg: ESConfig, ctx: RunContext) -> int:
    cfg.validate()
    spaces = spaces_for(ctx.env)
    return evaluator.run_evaluator(cfg, ctx, lambda params: deterministic_policy(cfg, spaces, params))

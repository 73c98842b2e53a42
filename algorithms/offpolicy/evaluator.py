"""The off-policy policy as the evaluator, a checkpoint and `surreal record` run it: the squashed
Gaussian's mean (or samples), scaled to the Box's bounds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from surreal.algorithms.common import evaluator
from surreal.algorithms.common.run import RunContext
from surreal.algorithms.envs.make import EnvSpaces, Obs, spaces_for
from surreal.algorithms.offpolicy import obs
from surreal.algorithms.offpolicy.config import OffPolicyConfig
from surreal.algorithms.offpolicy.policy import SquashedGaussian, to_env
from surreal.protocol.types import Params


def checkpoint_policy(cfg: OffPolicyConfig, spaces: EnvSpaces, state: Mapping[str, Any],
                      seed: int = 0) -> evaluator.TrainedAct:  # fmt: skip
    """The policy in a learner's checkpoint state: raw observations (an EnvBatch's) -> actions in
    the Box, the mean's or (deterministic=False) samples."""
    weights = {k.removeprefix("actor."): v.detach().cpu().numpy() for k, v in state["model"].items()
               if k.startswith("actor.")}  # fmt: skip
    return _acting(cfg, spaces.keep(cfg.obs_keys), weights, seed)


def eval_policy(cfg: OffPolicyConfig, spaces: EnvSpaces, params: Params) -> evaluator.Policy:
    """Raw observations -> the deterministic actions of the published version, in the Box."""
    act = _acting(cfg, spaces.keep(cfg.obs_keys), params.weights, params.version)
    return lambda obs: act(obs, True)


def _acting(cfg: OffPolicyConfig, sp: EnvSpaces, weights: Mapping[str, np.ndarray], seed: int
            ) -> evaluator.TrainedAct:  # fmt: skip
    net = SquashedGaussian(weights, cfg.activation, np.random.default_rng(seed), sp)
    low, high = sp.action_low, sp.action_high
    assert low is not None and high is not None

    def act(raw: Obs, deterministic: bool) -> np.ndarray:
        return to_env(net.act(obs.policy_rows(sp, raw), deterministic), low, high)

    return act


def run_evaluator(cfg: OffPolicyConfig, ctx: RunContext) -> int:
    cfg.validate()
    spaces = spaces_for(ctx.env)
    return evaluator.run_evaluator(cfg, ctx, lambda params: eval_policy(cfg, spaces, params),
                                   obs_keys=cfg.obs_keys)  # fmt: skip

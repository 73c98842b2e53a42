"""The off-policy policy as the evaluator, a checkpoint and `surreal record` run it: the
algorithm's (api.OffPolicy.policy) deterministic actions, or its samples, as the environment takes
them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from surreal.protocol.types import Params
from surreal.runtime import evaluator, hooks
from surreal.runtime.envs.make import EnvSpaces, Obs, spaces_for
from surreal.runtime.offpolicy import obs
from surreal.runtime.offpolicy.config import OffPolicyConfig
from surreal.runtime.offpolicy.policy import to_env
from surreal.runtime.run import RunContext

if TYPE_CHECKING:
    from surreal.algorithms.api import OffPolicy


def checkpoint_policy(algo: OffPolicy, cfg: OffPolicyConfig, spaces: EnvSpaces, state: Mapping[str, Any],
                      seed: int = 0) -> evaluator.TrainedAct:  # fmt: skip
    """The policy in a learner's checkpoint state: raw observations (an EnvBatch's) -> the
    environment's actions, the deterministic ones or (deterministic=False) samples."""
    weights = {k.removeprefix("actor."): v.detach().cpu().numpy() for k, v in state["model"].items()
               if k.startswith("actor.")}  # fmt: skip
    return _acting(algo, cfg, spaces.keep(cfg.obs_keys), weights, seed)


def eval_policy(algo: OffPolicy, cfg: OffPolicyConfig, spaces: EnvSpaces, params: Params) -> evaluator.Policy:
    """Raw observations -> the deterministic actions of the published version."""
    act = _acting(algo, cfg, spaces.keep(cfg.obs_keys), params.weights, params.version)
    return lambda obs: act(obs, True)


def _acting(algo: OffPolicy, cfg: OffPolicyConfig, sp: EnvSpaces, weights: Mapping[str, np.ndarray],
            seed: int) -> evaluator.TrainedAct:  # fmt: skip
    net = hooks.call(algo, "policy", algo.policy, cfg, sp, weights, np.random.default_rng(seed))

    def act(raw: Obs, deterministic: bool) -> np.ndarray:
        return to_env(net.act(obs.policy_rows(sp, raw), deterministic, 1.0), sp)

    return act


def run_evaluator(algo: OffPolicy, cfg: OffPolicyConfig, ctx: RunContext) -> int:
    cfg.validate()
    spaces = spaces_for(ctx.env)
    return evaluator.run_evaluator(cfg, ctx, lambda params: eval_policy(algo, cfg, spaces, params),
                                   obs_keys=cfg.obs_keys)  # fmt: skip

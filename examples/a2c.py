"""A2C, advantage actor-critic (Mnih et al., 2016, its synchronous form), on surreal's on-policy
runtime: a config and an update, nothing else. From the repository root:

    surreal create a2c --algo examples.a2c:A2C --env CartPole-v1 --steps 200000 --seed 0

docs/algorithms/writing.md walks through this file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from surreal.algorithms.api import Batch, Network, OnPolicy, OnPolicyConfig, Reduce


@dataclass(frozen=True)
class A2CConfig(OnPolicyConfig):
    """The runtime's settings (OnPolicyConfig), a few set for A2C on classic control, and A2C's own.
    `--set NAME=VALUE` changes any of them; errors name them as `a2c.NAME`."""

    # One update per 128 env steps: 2 agents x 4 envs x 16 steps (rl-zoo's CartPole A2C takes 8 x 5).
    envs_per_agent: int = 4
    fragment_length: int = 16
    steps_per_update: int = 128
    max_policy_lag: int = 2  # A2C has no importance ratio: keep what it learns from near-current
    learning_rate: float = 1e-3
    gae_lambda: float = 1.0  # n-step returns, bootstrapped at the fragment's end: A2C's targets
    norm_obs: bool = False
    norm_reward: bool = False
    eval_interval: int = 10_000
    # A2C's own
    ent_coef: float = 0.0  # entropy bonus weight
    vf_coef: float = 0.5  # value loss weight
    norm_adv: bool = False  # normalize the batch's advantages

    BOUNDS = {**OnPolicyConfig.BOUNDS, "ent_coef": (0.0, 1e12), "vf_coef": (0.0, 1e12)}


class A2C(OnPolicy):
    name = "a2c"
    Config = A2CConfig

    def update(self, net: Network, optimizer: torch.optim.Optimizer, batch: Batch,
               cfg: A2CConfig, reduce: Reduce) -> dict[str, Any]:  # fmt: skip
        """One gradient step on the whole batch: the policy gradient weighted by the advantages,
        the value regression to the returns, and the entropy bonus."""
        logp, entropy, values = net.evaluate(batch.obs, batch.actions)
        adv = batch.normalized(batch.advantages, reduce) if cfg.norm_adv else batch.advantages
        policy_loss = -adv * logp
        value_loss = 0.5 * (values - batch.returns).square()
        loss = batch.mean(policy_loss - cfg.ent_coef * entropy + cfg.vf_coef * value_loss)

        params = list(net.parameters())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        reduce.sum_grads(params)  # learner ranks: the gradient of the group's batch
        torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
        optimizer.step()

        parts = torch.stack([batch.mean(x.detach()) for x in (policy_loss, value_loss, entropy)])
        policy_loss, value_loss, entropy = reduce.sum(parts.double())  # the group's means
        return {"policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy}

"""PPO with a network of its own, from one file: the policy and value MLPs with LayerNorm after each
hidden layer (vector observations). `make` is the only hook it writes; the learner trains the
network, and actors and the evaluator run its policy head in torch (api.OnPolicy.policy). From the
repository root:

    surreal create lnp --algo examples.ln_ppo:LayerNormPPO --env CartPole-v1 --steps 100000 --seed 0

docs/algorithms/writing.md walks through it.
"""

from __future__ import annotations

from typing import Any

import torch

from surreal.algorithms.api import ActorCritic
from surreal.algorithms.ppo import PPO


def ln_mlp(width: int, hidden: tuple[int, ...], out: int, out_gain: float) -> torch.nn.Sequential:
    layers: list[torch.nn.Module] = []
    for size in hidden:
        layers += [torch.nn.Linear(width, size), torch.nn.LayerNorm(size), torch.nn.Tanh()]
        width = size
    last = torch.nn.Linear(width, out)
    torch.nn.init.orthogonal_(last.weight, out_gain)  # a small policy head starts near uniform
    torch.nn.init.zeros_(last.bias)
    return torch.nn.Sequential(*layers, last)


class LayerNormActorCritic(ActorCritic):
    """The runtime's actor-critic (its log_std, `head`, `evaluate` and `value`, so its policy is
    sampled as the runtime's is) with MLPs of its own as `policy` and `critic`."""

    def __init__(self, cfg: Any, spaces: Any) -> None:
        super().__init__(spaces, cfg.hidden_sizes, cfg.activation, cfg.log_std_init)
        self.policy = ln_mlp(spaces.obs_dim, cfg.hidden_sizes, spaces.head_dim, 0.01)
        self.critic = ln_mlp(spaces.obs_dim, cfg.hidden_sizes, 1, 1.0)


class LayerNormPPO(PPO):
    name = "ln_ppo"

    def make(self, cfg: Any, spaces: Any) -> LayerNormActorCritic:
        return LayerNormActorCritic(cfg, spaces)

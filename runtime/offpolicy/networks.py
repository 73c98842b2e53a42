"""Torch building blocks of off-policy networks (api re-exports them): an MLP, and Fujimoto's twin
Q functions on an observation encoder (encoder.py), as SAC and TD3 both train them."""

from __future__ import annotations

import torch
from torch import nn

from surreal.runtime.envs.make import EnvSpaces
from surreal.runtime.offpolicy.encoder import Encoder


def mlp(sizes: list[int], activation: str, last: bool = False) -> nn.Sequential:
    """Linear layers of `sizes`, `activation` ("relu" or "tanh") between them (after the last too
    with `last`: a trunk whose head comes after it). Its layers are numbered as policy.layers reads
    them."""
    act = nn.ReLU if activation == "relu" else nn.Tanh
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=False)):
        layers.append(nn.Linear(a, b))
        if last or i < len(sizes) - 2:
            layers.append(act())
    return nn.Sequential(*layers)


class TwinQ(nn.Module):
    """Two Q functions of (observation, action) on one observation encoder (SB3's critic)."""

    def __init__(self, spaces: EnvSpaces, hidden_sizes: tuple[int, ...], activation: str) -> None:
        super().__init__()
        self.encoder = Encoder(spaces)
        sizes = [self.encoder.out_dim + spaces.action_dim, *hidden_sizes, 1]
        self.q1, self.q2 = mlp(sizes, activation), mlp(sizes, activation)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([self.encoder(obs), action], -1)
        return self.q1(x).squeeze(-1), self.q2(x).squeeze(-1)

    def first(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """The first Q function alone (TD3's actor loss)."""
        return self.q1(torch.cat([self.encoder(obs), action], -1)).squeeze(-1)

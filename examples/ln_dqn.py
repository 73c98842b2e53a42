"""A DQN of one's own from one file, with a network of its own: a Q network with LayerNorm after
each hidden layer, run in torch by the actors (api.TorchActor), and a coefficient it adapts, the
running scale of its TD errors, where its Huber loss turns linear (a buffer of its module:
checkpointed, so a restarted learner goes on with it). From the repository root:

    surreal create ln --algo examples.ln_dqn:LayerNormDQN --env CartPole-v1 --steps 50000 --seed 0

docs/algorithms/writing.md walks through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from surreal.algorithms.api import Encoder, OffPolicy, OffPolicyConfig, TorchActor


@dataclass(frozen=True)
class LNDQNConfig(OffPolicyConfig):
    """The off-policy runtime's settings, set as rl-baselines3-zoo's DQN for CartPole, and its own."""

    learning_rate: float = 2.3e-3
    batch_size: int = 64
    buffer_size: int = 100_000
    replay_ratio: float = 32.0  # rows trained per env step: 128 updates of 64 rows per 256 steps
    learning_starts: int = 1_000
    random_steps: int = 1_000
    hidden_sizes: tuple[int, ...] = (256, 256)
    target_update_interval: int = 128  # updates between copies into the target network
    exploration_fraction: float = 0.16  # of the run, over which epsilon falls from 1 ...
    final_eps: float = 0.04  # ... to this
    scale_momentum: float = 0.99  # of the TD errors' running scale

    BOUNDS = {**OffPolicyConfig.BOUNDS, "target_update_interval": (1, 10**9), "final_eps": (0.0, 1.0),
              "exploration_fraction": (0.0, 1.0), "scale_momentum": (0.0, 1.0)}  # fmt: skip


class QNetwork(torch.nn.Module):
    def __init__(self, cfg: LNDQNConfig, spaces: Any) -> None:
        super().__init__()
        self.encoder = Encoder(spaces)  # a CNN for images; nothing for vectors
        layers, width = [], self.encoder.out_dim
        for size in cfg.hidden_sizes:
            layers += [torch.nn.Linear(width, size), torch.nn.LayerNorm(size), torch.nn.ReLU()]
            width = size
        self.body = torch.nn.Sequential(*layers, torch.nn.Linear(width, spaces.action_dim))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.body(self.encoder(obs))


class Nets(torch.nn.Module):
    def __init__(self, cfg: LNDQNConfig, spaces: Any) -> None:
        super().__init__()
        self.actor, self.target = QNetwork(cfg, spaces), QNetwork(cfg, spaces)  # `actor`: what actors run
        self.target.load_state_dict(self.actor.state_dict())
        self.target.requires_grad_(False)
        self.register_buffer("updates", torch.zeros((), dtype=torch.int64))
        self.register_buffer("td_scale", torch.ones(()))  # the coefficient it adapts
        self.optimizer = torch.optim.Adam(self.actor.parameters(), lr=cfg.learning_rate)

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"q": self.optimizer}


class EpsilonGreedy:
    def __init__(self, q: TorchActor, cfg: LNDQNConfig, n: int, rng: np.random.Generator) -> None:
        self.q, self.cfg, self.n, self.rng = q, cfg, n, rng

    def act(self, obs: np.ndarray, deterministic: bool = False, progress: float = 0.0) -> np.ndarray:
        greedy = self.q(obs).argmax(1)
        eps = 1.0 + min(1.0, progress / self.cfg.exploration_fraction) * (self.cfg.final_eps - 1.0)
        explore = (self.rng.random(len(greedy)) < eps) & (not deterministic)
        return np.where(explore, self.rng.integers(0, self.n, len(greedy)), greedy).astype(np.int64)


class LayerNormDQN(OffPolicy):
    name = "ln_dqn"
    Config = LNDQNConfig
    actions = "discrete"
    default_env = "CartPole-v1"
    steps = 50_000

    def make(self, cfg: LNDQNConfig, spaces: Any) -> Nets:
        return Nets(cfg, spaces)

    def policy(self, cfg: LNDQNConfig, spaces: Any, weights: Any, rng: Any) -> EpsilonGreedy:
        return EpsilonGreedy(TorchActor(QNetwork(cfg, spaces), weights), cfg, spaces.action_dim, rng)

    def update(self, nets: Nets, batch: dict[str, torch.Tensor], cfg: LNDQNConfig) -> dict[str, Any]:
        with torch.no_grad():
            next_q = nets.target(batch["next_obs"]).max(1).values
            target = batch["rewards"] + (1.0 - batch["terminated"]) * cfg.gamma * next_q
        q = nets.actor(batch["obs"]).gather(1, batch["actions"].unsqueeze(1)).squeeze(1)
        td = q - target
        with torch.no_grad():  # the running scale of the TD errors: where the Huber loss turns linear
            nets.td_scale.lerp_(td.abs().mean().clamp(min=1e-3), 1.0 - cfg.scale_momentum)
        loss = torch.nn.functional.huber_loss(q, target, delta=float(nets.td_scale))
        nets.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(nets.actor.parameters(), 10.0)
        nets.optimizer.step()
        nets.updates += 1
        if int(nets.updates) % cfg.target_update_interval == 0:
            nets.target.load_state_dict(nets.actor.state_dict())
        return {"loss": loss.detach(), "td_scale": nets.td_scale.clone(), "q_value": q.detach().mean()}

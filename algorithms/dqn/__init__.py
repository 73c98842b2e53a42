"""DQN (Mnih et al., "Human-level control through deep reinforcement learning", Nature 2015) on
the off-policy runtime: a Q network over Discrete actions (a CNN first for images), trained from
replay on the Huber loss toward r + gamma max_a' Q_target(s', a'), its target network copied every
`target_update_interval` updates; actors act epsilon-greedily, epsilon falling linearly from
`exploration_initial_eps` to `exploration_final_eps` over the first `exploration_fraction` of the
run. `double_q` takes the target's action from the online network (van Hasselt et al., 2016).
Written only against the API (api.OffPolicy), as Stable-Baselines3's dqn.py writes it. Presets
and their sources: docs/algorithms/dqn.md."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from surreal.algorithms.api import OffPolicy, OffPolicyConfig

if TYPE_CHECKING:
    import torch

    from surreal.algorithms.api import EnvSpaces


@dataclass(frozen=True)
class DQNConfig(OffPolicyConfig):
    learning_rate: float = 1e-4  # SB3's DQN defaults from here on
    buffer_size: int = 1_000_000
    batch_size: int = 32
    replay_ratio: float = 8.0  # batch 32, one gradient step per 4 env steps
    learning_starts: int = 100
    random_steps: int = 100
    gamma: float = 0.99
    hidden_sizes: tuple[int, ...] = (64, 64)
    target_update_interval: int = 2_500  # updates between copies into the target (SB3: 10k env steps)
    exploration_fraction: float = 0.1  # of the run's env steps over which epsilon falls
    exploration_initial_eps: float = 1.0
    exploration_final_eps: float = 0.05
    max_grad_norm: float = 10.0
    double_q: bool = False


DQNConfig.BOUNDS = {**OffPolicyConfig.BOUNDS, "target_update_interval": (1, 10**12),
                    "exploration_fraction": (0.0, 1.0), "exploration_initial_eps": (0.0, 1.0),
                    "exploration_final_eps": (0.0, 1.0), "max_grad_norm": (1e-12, 1e12)}  # fmt: skip

# rl-baselines3-zoo's hyperparams/dqn.yml, its gradient steps per env step as replay_ratio (batch x
# gradient_steps / train_freq) and its target_update_interval (env steps) as updates. SB3 copies the
# target between bursts of gradient_steps only: CartPole's every 10 env steps is once per burst of 128.
ZOO: dict[str, dict[str, Any]] = {
    "CartPole-v1": {"learning_rate": 2.3e-3, "batch_size": 64, "buffer_size": 100_000,
                    "learning_starts": 1_000, "random_steps": 1_000, "replay_ratio": 32.0,
                    "target_update_interval": 128, "exploration_fraction": 0.16,
                    "exploration_final_eps": 0.04, "hidden_sizes": (256, 256)},
    "Acrobot-v1": {"learning_rate": 6.3e-4, "batch_size": 128, "buffer_size": 50_000, "learning_starts": 1,
                   "random_steps": 0, "replay_ratio": 128.0, "target_update_interval": 250,
                   "exploration_fraction": 0.12, "exploration_final_eps": 0.1, "hidden_sizes": (256, 256)},
}  # fmt: skip
ZOO["LunarLander-v3"] = ZOO["Acrobot-v1"]
ATARI: dict[str, Any] = {"buffer_size": 100_000, "learning_starts": 100_000, "random_steps": 100_000,
                         "target_update_interval": 250, "exploration_final_eps": 0.01,
                         "hidden_sizes": (512,)}  # fmt: skip
DEFAULT_STEPS = {"CartPole-v1": 50_000, "Acrobot-v1": 100_000, "LunarLander-v3": 100_000}


class DQN(OffPolicy):
    name = "dqn"
    Config = DQNConfig
    actions = "discrete"
    default_env = "CartPole-v1"
    presets = ZOO
    atari = ATARI
    steps_for = DEFAULT_STEPS

    def make(self, cfg: DQNConfig, spaces: EnvSpaces) -> torch.nn.Module:
        return Nets(cfg, spaces)

    def policy(self, cfg: DQNConfig, spaces: EnvSpaces, weights: Mapping[str, Any], rng: Any) -> Any:
        return EpsilonGreedy(cfg, spaces, weights, rng)

    def update(self, nets: Any, batch: dict[str, torch.Tensor], cfg: DQNConfig) -> dict[str, Any]:
        """One gradient step of the Huber loss toward the target network's bootstrapped return
        (clipped to max_grad_norm); every target_update_interval-th, the target takes the weights."""
        import torch
        import torch.nn.functional as F  # noqa: N812

        with torch.no_grad():
            next_q = nets.target(batch["next_obs"])
            if cfg.double_q:
                best = nets.actor(batch["next_obs"]).argmax(1, keepdim=True)
                next_value = next_q.gather(1, best).squeeze(1)
            else:
                next_value = next_q.max(1).values
            target = batch["rewards"] + (1.0 - batch["terminated"]) * cfg.gamma * next_value
        q = nets.actor(batch["obs"]).gather(1, batch["actions"].unsqueeze(1)).squeeze(1)
        loss = F.smooth_l1_loss(q, target)
        nets.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(nets.actor.parameters(), cfg.max_grad_norm)
        nets.optimizer.step()
        nets.updates += 1
        if int(nets.updates) % cfg.target_update_interval == 0:
            nets.target.load_state_dict(nets.actor.state_dict())
        return {"loss": loss.detach(), "q_value": q.detach().mean()}


class EpsilonGreedy:
    """argmax_a Q(obs, a) in numpy; a uniform action instead with probability epsilon, epsilon by
    the run's progress (deterministic: always the argmax, as evaluations act)."""

    def __init__(self, cfg: DQNConfig, sp: EnvSpaces, weights: Mapping[str, Any], rng: Any) -> None:
        from surreal.algorithms.api import Features

        self.cfg, self.n, self.rng = cfg, sp.action_dim, rng
        self.features = Features(weights, cfg.activation, sp)
        self.q = (weights["q.weight"], weights["q.bias"])

    def epsilon(self, progress: float) -> float:
        cfg = self.cfg
        done = 1.0 if cfg.exploration_fraction == 0 else min(1.0, progress / cfg.exploration_fraction)
        return cfg.exploration_initial_eps + done * (cfg.exploration_final_eps - cfg.exploration_initial_eps)

    def act(self, obs: np.ndarray, deterministic: bool = False, progress: float = 0.0) -> np.ndarray:
        greedy = (self.features(obs) @ self.q[0].T + self.q[1]).argmax(1).astype(np.int64)
        if deterministic:
            return greedy
        explore = self.rng.random(len(greedy)) < self.epsilon(progress)
        return np.where(explore, self.rng.integers(0, self.n, len(greedy)), greedy).astype(np.int64)


def Nets(cfg: DQNConfig, spaces: EnvSpaces) -> Any:  # noqa: N802
    """The Q network (`actor`: what actors run), its target, the optimizer and the count of updates
    (a buffer: the target's schedule survives a restart), as one module."""
    import torch

    from surreal.algorithms.api import Encoder, mlp

    class QNetwork(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = Encoder(spaces)
            self.trunk = mlp([self.encoder.out_dim, *cfg.hidden_sizes], cfg.activation, last=True)
            self.q = torch.nn.Linear(cfg.hidden_sizes[-1], spaces.action_dim)

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return self.q(self.trunk(self.encoder(obs)))

    class DQNNets(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.actor, self.target = QNetwork(), QNetwork()
            self.target.load_state_dict(self.actor.state_dict())
            self.target.requires_grad_(False)
            self.register_buffer("updates", torch.zeros((), dtype=torch.int64))
            self.optimizer = torch.optim.Adam(self.actor.parameters(), lr=cfg.learning_rate)

        def optimizers(self) -> dict[str, torch.optim.Optimizer]:
            return {"q": self.optimizer}

    return DQNNets()

"""TD3, Twin Delayed DDPG (Fujimoto, van Hoof and Meger, "Addressing Function Approximation Error
in Actor-Critic Methods", ICML 2018), on the off-policy runtime: a deterministic policy explored
with Gaussian noise; twin critics whose lower estimate makes the target (clipped double Q);
target policy smoothing (clipped noise on the target's action); the actor and the targets updated
once per `policy_delay` critic updates. Written only against the API (api.OffPolicy), as
Stable-Baselines3's td3.py writes it (the peer benchmarks/offpolicy_vs_sb3.py measures it
against). Presets and their sources: docs/algorithms/td3.md."""

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
class TD3Config(OffPolicyConfig):
    learning_rate: float = 1e-3  # SB3's TD3
    hidden_sizes: tuple[int, ...] = (400, 300)  # the paper's and SB3's
    random_steps: int = 100  # SB3's learning_starts: uniform actions first
    learning_starts: int = 100
    exploration_noise: float = 0.1  # std of the Gaussian added to the actors' actions (in [-1, 1])
    policy_delay: int = 2  # critic updates per actor (and targets) update
    target_policy_noise: float = 0.2  # std of the smoothing noise on the target's action
    target_noise_clip: float = 0.5  # ... clipped to this


TD3Config.BOUNDS = {**OffPolicyConfig.BOUNDS, "exploration_noise": (0.0, 10.0), "policy_delay": (1, 10**6),
                    "target_policy_noise": (0.0, 10.0), "target_noise_clip": (0.0, 10.0)}  # fmt: skip

# rl-baselines3-zoo's hyperparams/td3.yml: Pendulum in 20k steps (gamma 0.98, 10k random steps,
# a 200k buffer); the MuJoCo tasks with 10k random steps. Images: a 100k buffer, as SAC's.
PRESETS: dict[str, dict[str, Any]] = {
    "Pendulum-v1": {"gamma": 0.98, "buffer_size": 200_000, "learning_starts": 10_000, "random_steps": 10_000},
}
MUJOCO: dict[str, Any] = {"learning_starts": 10_000, "random_steps": 10_000}
IMAGES: dict[str, Any] = {"buffer_size": 100_000}
DEFAULT_STEPS = {"Pendulum-v1": 20_000}


class TD3(OffPolicy):
    name = "td3"
    Config = TD3Config
    presets = PRESETS
    mujoco = MUJOCO
    images = IMAGES
    steps_for = DEFAULT_STEPS

    def make(self, cfg: TD3Config, spaces: EnvSpaces) -> torch.nn.Module:
        return Nets(cfg, spaces)

    def policy(self, cfg: TD3Config, spaces: EnvSpaces, weights: Mapping[str, Any], rng: Any) -> Any:
        return NoisyPolicy(cfg, spaces, weights, rng)

    def update(self, nets: Any, batch: dict[str, torch.Tensor], cfg: TD3Config) -> dict[str, Any]:
        """One critic step toward the smoothed, clipped double-Q target; every `policy_delay`-th,
        an actor step up the first critic and the targets' Polyak step."""
        import torch
        import torch.nn.functional as F  # noqa: N812

        obs, actions, next_obs = batch["obs"], batch["actions"], batch["next_obs"]
        with torch.no_grad():
            clip = cfg.target_noise_clip
            noise = (torch.randn_like(actions) * cfg.target_policy_noise).clamp(-clip, clip)
            next_actions = (nets.actor_target(next_obs) + noise).clamp(-1.0, 1.0)
            next_q = torch.min(*nets.q_target(next_obs, next_actions))
            target = batch["rewards"] + (1.0 - batch["terminated"]) * cfg.gamma * next_q
        q1, q2 = nets.q(obs, actions)
        critic_loss = F.mse_loss(q1, target) + F.mse_loss(q2, target)
        nets.critic_optimizer.zero_grad()
        critic_loss.backward()
        nets.critic_optimizer.step()
        nets.updates += 1
        stats = {"critic_loss": critic_loss.detach(), "q_value": torch.min(q1, q2).detach().mean()}
        if int(nets.updates) % cfg.policy_delay == 0:
            actor_loss = -nets.q.first(obs, nets.actor(obs)).mean()
            nets.actor_optimizer.zero_grad()
            actor_loss.backward()
            nets.actor_optimizer.step()
            with torch.no_grad():
                torch._foreach_lerp_(nets.target_params, nets.online_params, cfg.tau)
            stats["actor_loss"] = actor_loss.detach()
        return stats


class NoisyPolicy:
    """The deterministic policy, tanh(mu(trunk(encoder(obs)))), and Gaussian exploration noise
    on it, clipped to [-1, 1], in numpy (the actors' and the evaluator's)."""

    def __init__(self, cfg: TD3Config, sp: EnvSpaces, weights: Mapping[str, Any], rng: Any) -> None:
        from surreal.algorithms.api import Features

        self.features = Features(weights, cfg.activation, sp)
        self.noise, self.rng = cfg.exploration_noise, rng
        self.mu = (weights["mu.weight"], weights["mu.bias"])

    def act(self, obs: np.ndarray, deterministic: bool = False, progress: float = 0.0) -> np.ndarray:
        action = np.tanh(self.features(obs) @ self.mu[0].T + self.mu[1])
        if not deterministic:
            action = np.clip(action + self.noise * self.rng.standard_normal(action.shape), -1.0, 1.0)
        return action.astype(np.float32)


def Nets(cfg: TD3Config, spaces: EnvSpaces) -> Any:  # noqa: N802
    """TD3's actor and twin critics, their targets and optimizers, and the count of critic updates
    (a buffer: the delay's phase survives a restart), as one module."""
    import torch

    from surreal.algorithms.api import Encoder, TwinQ, mlp

    class Actor(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = Encoder(spaces)
            self.trunk = mlp([self.encoder.out_dim, *cfg.hidden_sizes], cfg.activation, last=True)
            self.mu = torch.nn.Linear(cfg.hidden_sizes[-1], spaces.action_dim)

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return torch.tanh(self.mu(self.trunk(self.encoder(obs))))

    class TD3Nets(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.actor, self.actor_target = Actor(), Actor()
            self.q, self.q_target = (TwinQ(spaces, cfg.hidden_sizes, cfg.activation) for _ in range(2))
            for online, target in ((self.actor, self.actor_target), (self.q, self.q_target)):
                target.load_state_dict(online.state_dict())
                target.requires_grad_(False)
            self.online_params = [*self.q.parameters(), *self.actor.parameters()]
            self.target_params = [*self.q_target.parameters(), *self.actor_target.parameters()]
            self.register_buffer("updates", torch.zeros((), dtype=torch.int64))
            self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=cfg.learning_rate)
            self.critic_optimizer = torch.optim.Adam(self.q.parameters(), lr=cfg.learning_rate)

        def optimizers(self) -> dict[str, torch.optim.Optimizer]:
            return {"actor": self.actor_optimizer, "critic": self.critic_optimizer}

    return TD3Nets()

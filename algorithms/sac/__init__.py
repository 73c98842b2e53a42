"""Soft Actor-Critic (Haarnoja et al., 2018, with the learned temperature of "SAC: Algorithms and
Applications") on the off-policy runtime (runtime/offpolicy): twin Q functions and their
Polyak-averaged targets, a tanh-squashed Gaussian policy, the entropy coefficient tuned to a target
entropy of -|A|. Its networks and update are below, as Stable-Baselines3's sac.py writes them (the
peer benchmarks/offpolicy_vs_sb3.py --algo sac measures it against). Presets and their sources:
docs/algorithms/sac.md."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from surreal.algorithms.api import OffPolicy, OffPolicyConfig

if TYPE_CHECKING:
    import torch

    from surreal.algorithms.api import EnvSpaces


@dataclass(frozen=True)
class SACConfig(OffPolicyConfig):
    ent_coef: float | None = None  # the entropy coefficient; None: learned (SB3's "auto")
    init_ent_coef: float = 1.0  # where the learned coefficient starts
    target_entropy: float | None = None  # None: -(action dimensions)


SACConfig.BOUNDS = {**OffPolicyConfig.BOUNDS, "ent_coef": (0.0, 1e6), "init_ent_coef": (1e-8, 1e6),
                    "target_entropy": (-1e6, 1e6)}  # fmt: skip

# rl-baselines3-zoo's hyperparameters/sac.yml (the tuned settings SB3's results use): Pendulum
# learns with lr 1e-3 in 20k steps; the MuJoCo tasks take SB3's defaults with 10k random steps.
PRESETS: dict[str, dict[str, Any]] = {
    "Pendulum-v1": {"learning_rate": 1e-3, "learning_starts": 100, "random_steps": 100},
}
MUJOCO: dict[str, Any] = {"learning_starts": 10_000, "random_steps": 10_000}
# Pixels: a replay row holds two images a byte a pixel (runtime/offpolicy/obs.py), so 1M rows of 84x84x3
# frames would be 42 GB; 100k (4.2 GB) is what SB3's and the zoo's image runs keep.
IMAGES: dict[str, Any] = {"buffer_size": 100_000}
DEFAULT_STEPS = {"Pendulum-v1": 20_000}


class SAC(OffPolicy):
    name = "sac"
    Config = SACConfig
    presets = PRESETS
    mujoco = MUJOCO
    images = IMAGES
    steps_for = DEFAULT_STEPS

    def make(self, cfg: SACConfig, spaces: EnvSpaces) -> torch.nn.Module:
        return Nets(cfg, spaces)

    def update(self, nets: Any, batch: dict[str, torch.Tensor], cfg: SACConfig) -> dict[str, Any]:
        """One gradient step of the temperature, the twin critics and the policy on `batch` (in
        SB3's order), then the targets' Polyak step."""
        import torch
        import torch.nn.functional as F  # noqa: N812

        obs, actions, next_obs = batch["obs"], batch["actions"], batch["next_obs"]
        action, log_prob = nets.actor(obs)
        if nets.log_alpha is not None:  # the temperature, toward the target entropy
            alpha = nets.log_alpha.detach().exp()
            alpha_loss = -(nets.log_alpha * (log_prob + nets.target_entropy).detach()).mean()
            nets.alpha_optimizer.zero_grad()
            alpha_loss.backward()
            nets.alpha_optimizer.step()
        else:
            alpha = torch.tensor(cfg.ent_coef)
        with torch.no_grad():  # the soft Bellman target, from the targets' lower estimate
            next_action, next_log_prob = nets.actor(next_obs)
            next_q = torch.min(*nets.q_target(next_obs, next_action)) - alpha * next_log_prob
            target = batch["rewards"] + (1.0 - batch["terminated"]) * cfg.gamma * next_q
        q1, q2 = nets.q(obs, actions)
        critic_loss = 0.5 * (F.mse_loss(q1, target) + F.mse_loss(q2, target))
        nets.critic_optimizer.zero_grad()
        critic_loss.backward()
        nets.critic_optimizer.step()
        actor_loss = (alpha * log_prob - torch.min(*nets.q(obs, action))).mean()
        nets.actor_optimizer.zero_grad()
        actor_loss.backward()
        nets.actor_optimizer.step()
        with torch.no_grad():
            torch._foreach_lerp_(nets.target_params, nets.critic_params, cfg.tau)
        return {"critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach(),
                "ent_coef": alpha, "entropy": -log_prob.detach().mean(),
                "q_value": torch.min(q1, q2).detach().mean()}  # fmt: skip


def Nets(cfg: SACConfig, spaces: EnvSpaces) -> Any:  # noqa: N802
    """SAC's networks and optimizers as one module (its state_dict is the checkpoint's model).
    The actor and the twin critics each put their own observation encoder first (SB3's
    share_features_extractor=False; the twins share theirs, as SB3's critic does)."""
    import torch

    from surreal.algorithms.api import LOG_STD_MAX, LOG_STD_MIN, Encoder, TwinQ, mlp

    action_dim = spaces.action_dim

    class Actor(torch.nn.Module):
        """The squashed Gaussian; api.OffPolicy.policy runs the same weights in numpy."""

        def __init__(self) -> None:
            super().__init__()
            self.encoder = Encoder(spaces)
            self.trunk = mlp([self.encoder.out_dim, *cfg.hidden_sizes], cfg.activation, last=True)
            self.mu = torch.nn.Linear(cfg.hidden_sizes[-1], action_dim)
            self.log_std = torch.nn.Linear(cfg.hidden_sizes[-1], action_dim)

        def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            h = self.trunk(self.encoder(obs))
            mean, log_std = self.mu(h), self.log_std(h).clamp(LOG_STD_MIN, LOG_STD_MAX)
            u = mean + log_std.exp() * torch.randn_like(mean)
            # log N(u; mean, std) less log|d tanh(u)/du| = 2 (log 2 - u - softplus(-2u)), stably
            gaussian = -0.5 * ((u - mean) / log_std.exp()).square() - log_std - 0.5 * math.log(2 * math.pi)
            squash = 2.0 * (math.log(2.0) - u - torch.nn.functional.softplus(-2.0 * u))
            log_prob = (gaussian - squash).sum(-1)
            return torch.tanh(u), log_prob

    class SACNets(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.actor = Actor()
            self.q, self.q_target = (TwinQ(spaces, cfg.hidden_sizes, cfg.activation) for _ in range(2))
            self.q_target.load_state_dict(self.q.state_dict())
            self.q_target.requires_grad_(False)
            self.critic_params = list(self.q.parameters())
            self.target_params = list(self.q_target.parameters())
            self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=cfg.learning_rate, fused=True)
            self.critic_optimizer = torch.optim.Adam(self.critic_params, lr=cfg.learning_rate, fused=True)
            self.log_alpha: torch.nn.Parameter | None = None
            self.target_entropy = -float(action_dim) if cfg.target_entropy is None else cfg.target_entropy
            if cfg.ent_coef is None:
                self.log_alpha = torch.nn.Parameter(torch.tensor(math.log(cfg.init_ent_coef)))
                self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=cfg.learning_rate)

        def optimizers(self) -> dict[str, torch.optim.Optimizer]:
            found: dict[str, torch.optim.Optimizer] = {
                "actor": self.actor_optimizer,
                "critic": self.critic_optimizer,
            }
            return {**found, "alpha": self.alpha_optimizer} if self.log_alpha is not None else found

    return SACNets()

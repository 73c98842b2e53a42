"""PPO's settings beside the on-policy runtime's. Defaults are a sane CleanRL-like starting
point; see presets.py."""

from __future__ import annotations

from dataclasses import dataclass

from surreal.algorithms.api import HUGE, TINY, OnPolicyConfig


@dataclass(frozen=True)
class PPOConfig(OnPolicyConfig):
    minibatch_size: int = 512  # samples per gradient step
    epochs: int = 10  # passes over the batch per update
    clip_coef: float = 0.2  # PPO ratio clip (also the value clip when clip_vloss)
    clip_vloss: bool = True  # clip the value update around the batch's old values
    ent_coef: float = 0.0  # entropy bonus weight
    vf_coef: float = 0.5  # value loss weight
    target_kl: float | None = None  # stop an update's epochs once approx KL exceeds this
    norm_adv: bool = True  # normalize advantages per minibatch

    BOUNDS = {
        **OnPolicyConfig.BOUNDS, "minibatch_size": (1, 10_000_000), "epochs": (1, 1000),
        "clip_coef": (TINY, HUGE), "ent_coef": (0.0, HUGE), "vf_coef": (0.0, HUGE), "target_kl": (TINY, HUGE),
    }  # fmt: skip

    def validate(self) -> None:
        super().validate()
        self.require(
            self.minibatch_size <= self.steps_per_update, "minibatch_size", "must be <= steps_per_update"
        )

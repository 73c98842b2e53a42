"""The off-policy actor's policy in numpy (actors and the evaluator of vector environments never
import torch): a squashed Gaussian, tanh(mean + std * noise), on an MLP trunk after the
observation encoder (encoder.py: nothing for vectors, a CNN in torch for an image), as SAC's
actor network is (algorithms/sac). It takes packed observation rows (obs.policy_rows); actions
are in [-1, 1] per dimension, `to_env` scales them to the Box's bounds."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from surreal.algorithms.common.numpy_mlp import Layers
from surreal.algorithms.envs.make import EnvSpaces

# The log std's range (SB3's and the SAC authors' clamp), the same in the learner's network.
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


def _layers(weights: Mapping[str, np.ndarray], prefix: str) -> Layers:
    names = sorted({k.split(".")[1] for k in weights if k.startswith(prefix + ".")}, key=int)
    return [(weights[f"{prefix}.{i}.weight"], weights[f"{prefix}.{i}.bias"]) for i in names]


class SquashedGaussian:
    """Packed observations [N, D] -> actions [N, A] in [-1, 1]: samples, or the mean's tanh
    (`deterministic`)."""

    def __init__(
        self, weights: Mapping[str, np.ndarray], activation: str, rng: np.random.Generator, sp: EnvSpaces
    ) -> None:
        self.encoder: Callable[[np.ndarray], np.ndarray] | None = None
        if any(k.startswith("encoder.") for k in weights):  # a CNN's weights: an image among the leaves
            from surreal.algorithms.offpolicy.encoder import PolicyEncoder

            self.encoder = PolicyEncoder(weights, sp)
        self.trunk = _layers(weights, "trunk")
        self.mu = (weights["mu.weight"], weights["mu.bias"])
        self.log_std = (weights["log_std.weight"], weights["log_std.bias"])
        self.relu = activation == "relu"
        self.rng = rng

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        h = obs.astype(np.float32, copy=False)
        if self.encoder is not None:
            h = self.encoder(h)
        for w, b in self.trunk:
            h = h @ w.T + b
            h = np.maximum(h, 0.0) if self.relu else np.tanh(h)
        mean = h @ self.mu[0].T + self.mu[1]
        if deterministic:
            return np.tanh(mean).astype(np.float32)
        log_std = np.clip(h @ self.log_std[0].T + self.log_std[1], LOG_STD_MIN, LOG_STD_MAX)
        noise = self.rng.standard_normal(mean.shape).astype(np.float32)
        return np.tanh(mean + np.exp(log_std) * noise).astype(np.float32)


def to_env(actions: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Actions in [-1, 1] -> the Box [low, high]."""
    return (low + (actions + 1.0) * 0.5 * (high - low)).astype(np.float32)

"""The policies off-policy actors and evaluators run, in numpy (actors of vector environments never
import torch), from the weights the learner publishes (its networks' `actor`):

- `Features`: the observation encoder (encoder.py: nothing for vectors, a CNN in torch for an
  image) and an MLP `trunk` after it; the building block of every policy below and of an
  algorithm's own (api.OffPolicy.policy).
- `SquashedGaussian`: SAC's, tanh(mean + std * noise), the family's default.

A policy takes packed observation rows (obs.policy_rows) and gives actions as the replay holds
them: in [-1, 1] per dimension for a Box (`to_env` scales them to its bounds), an int64 index for
a Discrete. `progress` is the run's share of its steps done (an exploration schedule's clock)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np

from surreal.runtime.envs.make import EnvSpaces
from surreal.runtime.numpy_mlp import Layers

# The log std's range (SB3's and the SAC authors' clamp), the same in the learner's network.
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


class Policy(Protocol):
    def act(self, obs: np.ndarray, deterministic: bool = False, progress: float = 0.0) -> np.ndarray:
        """Packed observations [N, D] -> actions [N, A] in [-1, 1] (a Box) or indices [N] (a
        Discrete): the policy's samples, or its best guess (`deterministic`, as evaluations run)."""
        ...


def layers(weights: Mapping[str, np.ndarray], prefix: str) -> Layers:
    """The Linear layers of the Sequential `prefix` (`prefix.<i>.weight`, `.bias`), in order."""
    names = sorted({k.split(".")[1] for k in weights if k.startswith(prefix + ".")}, key=int)
    return [(weights[f"{prefix}.{i}.weight"], weights[f"{prefix}.{i}.bias"]) for i in names]


def linear(weights: Mapping[str, np.ndarray], name: str) -> tuple[np.ndarray, np.ndarray]:
    """The Linear layer `name` (`name.weight`, `name.bias`)."""
    return weights[f"{name}.weight"], weights[f"{name}.bias"]


class Features:
    """Packed rows -> the trunk's features: the `encoder.*` (a CNN's weights: an image among the
    leaves) then the `trunk` MLP, `activation` after each of its layers."""

    def __init__(self, weights: Mapping[str, np.ndarray], activation: str, sp: EnvSpaces,
                 trunk: str = "trunk") -> None:  # fmt: skip
        self.encoder: Callable[[np.ndarray], np.ndarray] | None = None
        if any(k.startswith("encoder.") for k in weights):
            from surreal.runtime.offpolicy.encoder import PolicyEncoder

            self.encoder = PolicyEncoder(weights, sp)
        self.trunk = layers(weights, trunk)
        self.relu = activation == "relu"

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        h = obs.astype(np.float32, copy=False)
        if self.encoder is not None:
            h = self.encoder(h)
        for w, b in self.trunk:
            h = h @ w.T + b
            h = np.maximum(h, 0.0) if self.relu else np.tanh(h)
        return h


class SquashedGaussian:
    """SAC's actor: samples tanh(mean + std * noise), or the mean's tanh (`deterministic`)."""

    def __init__(
        self, weights: Mapping[str, np.ndarray], activation: str, rng: np.random.Generator, sp: EnvSpaces
    ) -> None:
        self.features = Features(weights, activation, sp)
        self.mu, self.log_std = linear(weights, "mu"), linear(weights, "log_std")
        self.rng = rng

    def act(self, obs: np.ndarray, deterministic: bool = False, progress: float = 0.0) -> np.ndarray:
        h = self.features(obs)
        mean = h @ self.mu[0].T + self.mu[1]
        if deterministic:
            return np.tanh(mean).astype(np.float32)
        log_std = np.clip(h @ self.log_std[0].T + self.log_std[1], LOG_STD_MIN, LOG_STD_MAX)
        noise = self.rng.standard_normal(mean.shape).astype(np.float32)
        return np.tanh(mean + np.exp(log_std) * noise).astype(np.float32)


def random_actions(sp: EnvSpaces, n: int, rng: np.random.Generator) -> np.ndarray:
    """Uniform actions for n envs, as the replay holds them (random_steps)."""
    if sp.discrete:
        return rng.integers(0, sp.action_dim, size=n, dtype=np.int64)
    return rng.uniform(-1.0, 1.0, (n, sp.action_dim)).astype(np.float32)


def to_env(actions: np.ndarray, sp: EnvSpaces) -> np.ndarray:
    """Actions as the replay holds them -> the environment's: a Box's [-1, 1] scaled to [low, high];
    a Discrete's indices as they are."""
    if sp.discrete:
        return actions
    low, high = sp.action_low, sp.action_high
    assert low is not None and high is not None  # OffPolicy.check_env
    return (low + (actions + 1.0) * 0.5 * (high - low)).astype(np.float32)


class TorchActor:
    """A network of an algorithm's own, as actors run it: `module` (what `make` builds as `actor`)
    with the published weights, on the CPU with one torch thread (an actor's core steps its
    environments too): packed rows -> its outputs (of `method`) as numpy (a tuple's first)."""

    def __init__(self, module: Any, weights: Mapping[str, np.ndarray], method: str = "forward") -> None:
        import torch

        torch.set_num_threads(1)
        state = {k: torch.as_tensor(np.asarray(v)) for k, v in weights.items()}
        try:
            module.load_state_dict(state)
        except RuntimeError as exc:
            raise ValueError(f"the published weights do not fit the actor network: "
                             f"{str(exc).splitlines()[0]}") from None  # fmt: skip
        self.module = module.eval()
        self.call = getattr(self.module, method)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        import torch

        with torch.inference_mode():
            out = self.call(torch.from_numpy(np.ascontiguousarray(obs, np.float32)))
        return (out[0] if isinstance(out, tuple) else out).numpy()

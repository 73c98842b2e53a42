"""The PPO policy as actors and the evaluator run it: `ActorCritic`'s policy half, in numpy.

The learner trains the torch `ActorCritic` and publishes its state_dict; `NumpyPolicy` reads the
policy MLP (`policy.<i>.weight`, `policy.<i>.bias`) and `log_std` from those weights and samples
exactly what `ActorCritic.act` would: the same distribution and the same log-probabilities, which
the learner's importance ratio relies on. The critic is not needed here (the learner computes
values with its current network). No torch import: see common/numpy_mlp.py for why.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

import numpy as np

from surreal.algorithms.common.envs import EnvSpaces
from surreal.algorithms.common.normalization import ObsNormalizer
from surreal.algorithms.common.numpy_mlp import Layers, forward
from surreal.algorithms.ppo.config import PPOConfig
from surreal.protocol.types import Params

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
_POLICY_KEY = re.compile(r"policy\.(\d+)\.(weight|bias)")


def policy_layers(weights: Mapping[str, np.ndarray]) -> Layers:
    """The policy MLP's (weight [out, in], bias [out]) pairs in order, as float32 arrays."""
    found: dict[int, dict[str, np.ndarray]] = {}
    for key, value in weights.items():
        if m := _POLICY_KEY.fullmatch(key):
            found.setdefault(int(m[1]), {})[m[2]] = np.asarray(value, np.float32)
    if not found:
        raise ValueError("the parameters hold no policy layers (policy.<i>.weight)")
    layers = []
    for index in sorted(found):
        if set(found[index]) != {"weight", "bias"}:
            raise ValueError(f"policy layer {index} lacks its weight or its bias")
        layers.append((found[index]["weight"], found[index]["bias"]))
    return layers


class NumpyPolicy:
    """Samples actions and their log-probabilities for a batch of (normalized) observations."""

    def __init__(
        self,
        weights: Mapping[str, np.ndarray],
        spaces: EnvSpaces,
        activation: str,
        rng: np.random.Generator | None = None,  # needed to sample; the mode needs none
    ) -> None:
        self.spaces = spaces
        self.activation = activation
        self.layers = policy_layers(weights)
        out_dim = self.layers[-1][0].shape[0]
        if out_dim != spaces.action_dim or self.layers[0][0].shape[1] != spaces.obs_dim:
            raise ValueError(
                f"the policy maps {self.layers[0][0].shape[1]} inputs to {out_dim} outputs; the "
                f"environment has {spaces.obs_dim} observations and {spaces.action_dim} actions"
            )
        self.rng = rng
        if not spaces.discrete:
            if "log_std" not in weights:
                raise ValueError("the parameters of a Gaussian policy lack log_std")
            log_std = np.asarray(weights["log_std"], np.float32)
            self.std = np.exp(log_std)
            self._logp_const = np.float32(-log_std.sum() - _HALF_LOG_2PI * spaces.action_dim)

    def act(self, obs: np.ndarray, deterministic: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Actions [B] int64 or [B, A] float32 for `obs` [B, D], and their log-probs [B] float32.

        Deterministic: the mode (argmax, or the Gaussian mean), with its log-probability.
        """
        out = forward(self.layers, obs, self.activation)
        rng = None if deterministic else self.rng
        if not deterministic and rng is None:
            raise RuntimeError("this policy has no random generator, so it can only act deterministically")
        if self.spaces.discrete:
            return self._categorical(out, rng)
        if rng is None:
            return out, np.full(len(out), self._logp_const, np.float32)
        noise = rng.standard_normal(out.shape, np.float32)
        actions = out + noise * self.std
        logp = self._logp_const - 0.5 * np.einsum("ij,ij->i", noise, noise)
        return actions, logp.astype(np.float32, copy=False)

    def _categorical(
        self, logits: np.ndarray, rng: np.random.Generator | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Sample with `rng` (the argmax without one)."""
        shifted = logits - logits.max(axis=-1, keepdims=True)
        logp_all = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        if rng is None:
            actions = logp_all.argmax(axis=-1)
        else:  # inverse CDF: the first action whose cumulative probability exceeds u
            cdf = np.cumsum(np.exp(logp_all), axis=-1)
            u = rng.random((len(cdf), 1), np.float32) * cdf[:, -1:]
            actions = np.minimum((cdf <= u).sum(axis=-1), cdf.shape[-1] - 1)
        actions = actions.astype(np.int64)
        return actions, logp_all[np.arange(len(actions)), actions].astype(np.float32)


def policy_from_params(
    cfg: PPOConfig, spaces: EnvSpaces, params: Params, rng: np.random.Generator | None = None
) -> tuple[NumpyPolicy, ObsNormalizer | None]:
    """The policy in `params` and the observation normalizer shipped with it (None if unused)."""
    policy = NumpyPolicy(params.weights, spaces, cfg.activation, rng)
    if not cfg.norm_obs:
        return policy, None
    ex = params.extras
    return policy, ObsNormalizer(ex["obs_mean"], ex["obs_var"], cfg.obs_clip)

"""The policy as actors and the evaluator run it: `ActorCritic`'s policy half, in numpy.

`NumpyPolicy` reads the policy MLP (`policy.<i>.weight`, `policy.<i>.bias`) and `log_std` from the
learner's published state_dict and samples from the distributions whose log-probabilities
`ActorCritic.evaluate` computes, which the learner's importance ratio relies on. No torch import
for vectors (runtime/numpy_mlp.py says why); images take the CNN's head from cnn.py (torch).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np

from surreal.protocol.types import Params
from surreal.runtime import hooks
from surreal.runtime.envs import obs_leaves
from surreal.runtime.envs.make import EnvSpaces, Obs
from surreal.runtime.normalization import ObsNormalizer
from surreal.runtime.numpy_mlp import Layers, forward
from surreal.runtime.onpolicy.config import OnPolicyConfig
from surreal.runtime.onpolicy.fragment import obs_stats_dim

if TYPE_CHECKING:
    from surreal.algorithms.api import OnPolicy

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
    """Samples actions and their log-probabilities for a batch of (normalized) observations.

    The head (the policy network up to its logits or Gaussian means) is the MLP in numpy here; for
    images it is the CNN (`CNNHead`, torch), and the sampling below is the same for both.
    """

    def __init__(
        self,
        weights: Mapping[str, np.ndarray],
        spaces: EnvSpaces,
        activation: str,
        rng: np.random.Generator | None = None,  # needed to sample; the mode needs none
        head: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> None:
        self.spaces = spaces
        self.activation = activation
        self.head: Callable[[np.ndarray], np.ndarray]
        if head is not None:  # a network of an algorithm's own (api.OnPolicy.policy)
            self.head = head
        elif spaces.has_image:
            from surreal.runtime.onpolicy.cnn import CNNHead  # torch: only actors of image environments

            self.head = CNNHead(weights, spaces, activation)
        else:
            self.head = self._mlp_head(weights, spaces)
        self.rng = rng
        if spaces.gaussian_dim:
            if "log_std" not in weights:
                raise ValueError("the parameters of a Gaussian policy lack log_std")
            log_std = np.asarray(weights["log_std"], np.float32)
            if log_std.shape != (spaces.gaussian_dim,):
                raise ValueError(f"log_std has shape {log_std.shape}; the actions have "
                                 f"{spaces.gaussian_dim} Gaussian columns")  # fmt: skip
            self.std = np.exp(log_std)
            self._logp_const = np.float32(-log_std.sum() - _HALF_LOG_2PI * spaces.gaussian_dim)

    def _mlp_head(
        self, weights: Mapping[str, np.ndarray], spaces: EnvSpaces
    ) -> Callable[[np.ndarray], np.ndarray]:
        self.layers = layers = policy_layers(weights)
        out_dim = layers[-1][0].shape[0]
        if out_dim != spaces.head_dim or layers[0][0].shape[1] != spaces.obs_dim:
            raise ValueError(
                f"the policy maps {layers[0][0].shape[1]} inputs to {out_dim} outputs; the "
                f"environment has {spaces.obs_dim} observations and {spaces.head_dim} action outputs"
            )
        return lambda obs: forward(layers, obs, self.activation)

    def act(self, obs: np.ndarray, deterministic: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Actions [B] int64 or [B, A] float32 for `obs` [B, ...], and their log-probs [B] float32.
        Actions of several leaves are float32 rows [B, A]: categorical indices, then Gaussian values.

        Deterministic: the mode (argmax, or the Gaussian mean), with its log-probability.
        """
        out = self.head(obs)
        rng = None if deterministic else self.rng
        if not deterministic and rng is None:
            raise RuntimeError("this policy has no random generator, so it can only act deterministically")
        if self.spaces.discrete:
            return _sample_categorical(out, rng, out.shape[-1])
        if self.spaces.structured_actions:
            return self._leaves(out, rng)
        return self._gaussian(out, rng)

    def _gaussian(self, means: np.ndarray, rng: np.random.Generator | None) -> tuple[np.ndarray, np.ndarray]:
        if rng is None:
            return means, np.full(len(means), self._logp_const, np.float32)
        noise = rng.standard_normal(means.shape, np.float32)
        actions = means + noise * self.std
        logp = self._logp_const - 0.5 * np.einsum("ij,ij->i", noise, noise)
        return actions, logp.astype(np.float32, copy=False)

    def _leaves(self, out: np.ndarray, rng: np.random.Generator | None) -> tuple[np.ndarray, np.ndarray]:
        """Every categorical column sampled from its logits, every Gaussian one from its mean; the
        log-probabilities summed (act_leaves.ActionLayout says which output is which)."""
        layout = self.spaces.action_layout
        k = len(layout.nvec)
        actions = np.empty((len(out), layout.columns), np.float32)
        logp = np.zeros(len(out), np.float32)
        if k:
            index, chosen = _sample_categorical(layout.column_logits(out), rng, layout.values)
            actions[:, :k] = index
            logp += chosen.sum(axis=-1)
        if layout.gaussian:
            actions[:, k:], g_logp = self._gaussian(out[:, layout.logits :], rng)
            logp += g_logp
        return actions, logp


def _sample_categorical(
    logits: np.ndarray, rng: np.random.Generator | None, n: int | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Indices int64 [...] drawn from `logits` [..., n] with `rng` (the argmax without one), and
    their float32 log-probabilities. `n`: the values each distribution takes (logits beyond them
    are -inf)."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    logp_all = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    if rng is None:
        actions = logp_all.argmax(axis=-1)
    else:  # inverse CDF: the first action whose cumulative probability exceeds u
        cdf = np.cumsum(np.exp(logp_all), axis=-1)
        u = rng.random((*cdf.shape[:-1], 1), np.float32) * cdf[..., -1:]
        actions = np.minimum((cdf <= u).sum(axis=-1), np.asarray(n) - 1)
    actions = actions.astype(np.int64)
    chosen = np.take_along_axis(logp_all, actions[..., None], axis=-1)[..., 0]
    return actions, chosen.astype(np.float32)


def policy_from_params(
    cfg: OnPolicyConfig,
    spaces: EnvSpaces,
    params: Params,
    rng: np.random.Generator | None = None,
    algo: OnPolicy | None = None,
) -> tuple[NumpyPolicy, ObsNormalizer | None]:
    """The policy in `params` (`algo`'s, the runtime's without one) and the observation normalizer
    shipped with it (None if unused; of observations of several leaves, it normalizes their vector
    leaves side by side: policy_input)."""
    policy = (NumpyPolicy(params.weights, spaces, cfg.activation, rng) if algo is None else
              hooks.call(algo, "policy", algo.policy, cfg, spaces, params.weights, rng))  # fmt: skip
    if not cfg.norm_obs or spaces.pixels or not obs_stats_dim(spaces):  # images: scaled in the CNN
        return policy, None
    ex = params.extras
    return policy, ObsNormalizer(ex["obs_mean"], ex["obs_var"], cfg.obs_clip)


def policy_input(spaces: EnvSpaces, norm: ObsNormalizer | None, obs: Obs) -> np.ndarray:
    """A batch of raw observations (an EnvBatch's) as the policy takes them: normalized vectors,
    uint8 images, or the packed rows of observations of several leaves (obs_leaves.py)."""
    if not isinstance(obs, dict):
        return norm(obs) if norm is not None else obs
    leaves = spaces.obs_leaves
    rows = {name: np.array(array) for name, array in obs.items()}
    if norm is not None:
        obs_leaves.set_float_block(leaves, rows, norm(obs_leaves.float_block(leaves, rows)))
    return obs_leaves.pack(leaves, rows)

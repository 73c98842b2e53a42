"""Deterministic linear and MLP policies over a flat parameter vector, in numpy.

ES perturbs the flat vector; `BatchPolicy` holds one vector per env slot (each slot evaluates its
own perturbation) and runs all of them on a batch of observations in a few batched matmuls.
Actions: argmax of the outputs (Discrete) or the outputs clipped to the bounds (Box); for actions
of several leaves (act_leaves.py) a row: the argmax of each categorical column's outputs, then the
Gaussian columns' outputs as they are (the environment's action is made from it, clipped, where
it is stepped).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from surreal.runtime.envs.act_leaves import ActionLayout
from surreal.runtime.envs.make import EnvSpaces
from surreal.runtime.es.config import ESConfig
from surreal.runtime.numpy_mlp import Layers, forward


@dataclass(frozen=True, eq=False)
class PolicySpec:
    """The shape of a policy: what its flat parameter vector means."""

    obs_dim: int
    action_dim: int  # outputs: one per action (Discrete) or the action vector (Box)
    discrete: bool
    hidden_sizes: tuple[int, ...]  # () for a linear policy
    activation: str  # hidden activation: "tanh" or "relu"
    action_low: np.ndarray | None = None  # Box bounds; None for Discrete
    action_high: np.ndarray | None = None
    layout: ActionLayout | None = None  # actions of several leaves: what the outputs are

    @classmethod
    def from_config(cls, cfg: ESConfig, spaces: EnvSpaces) -> PolicySpec:
        hidden = () if cfg.policy == "linear" else tuple(cfg.hidden_sizes)
        layout = spaces.action_layout if spaces.structured_actions else None
        return cls(spaces.obs_dim, spaces.action_dim, spaces.discrete, hidden, cfg.activation,
                   spaces.action_low, spaces.action_high, layout)  # fmt: skip

    @property
    def outputs(self) -> int:
        """The network's outputs: an action's (Discrete, Box), or the layout's logits and values."""
        return self.layout.head_dim if self.layout is not None else self.action_dim

    @property
    def layer_shapes(self) -> list[tuple[int, int]]:
        sizes = (self.obs_dim, *self.hidden_sizes, self.outputs)
        return [(b, a) for a, b in zip(sizes[:-1], sizes[1:], strict=True)]

    @property
    def num_params(self) -> int:
        return sum(o * i + o for o, i in self.layer_shapes)


def init_params(spec: PolicySpec, seed: int) -> np.ndarray:
    """Initial flat parameters [P] float32. Linear: zeros (as ARS). MLP: rows of each weight
    matrix scaled to norm 1 (hidden) or 0.01 (output), zero biases (as OpenAI's ES)."""
    flat = np.zeros(spec.num_params, np.float32)
    if not spec.hidden_sizes:
        return flat
    rng = np.random.Generator(np.random.PCG64(seed))
    layers = unflatten(spec, flat)
    for k, (w, _) in enumerate(layers):
        scale = 0.01 if k == len(layers) - 1 else 1.0
        init = rng.standard_normal(w.shape)
        w[...] = init * (scale / np.linalg.norm(init, axis=-1, keepdims=True))
    return flat


def unflatten(spec: PolicySpec, flat: np.ndarray) -> Layers:
    """Views of `flat` [..., P] as layers (weights [..., out, in], biases [..., out]); writing
    to them writes to `flat`."""
    layers: Layers = []
    lead, offset = flat.shape[:-1], 0
    for out_dim, in_dim in spec.layer_shapes:
        w = flat[..., offset : offset + out_dim * in_dim].reshape(*lead, out_dim, in_dim)
        offset += out_dim * in_dim
        b = flat[..., offset : offset + out_dim]
        offset += out_dim
        layers.append((w, b))
    return layers


def to_actions(spec: PolicySpec, outputs: np.ndarray) -> np.ndarray:
    """Deterministic actions from policy outputs [N, A] (rows for actions of several leaves)."""
    if spec.discrete:
        return np.argmax(outputs, axis=-1)
    layout = spec.layout
    if layout is None:
        return np.clip(outputs, spec.action_low, spec.action_high)
    k = len(layout.nvec)
    rows = np.empty((len(outputs), layout.columns), np.float32)
    if k:
        rows[:, :k] = layout.column_logits(outputs).argmax(axis=-1)
    rows[:, k:] = outputs[:, layout.logits :]
    return rows


class BatchPolicy:
    """`n` policies, each with its own flat parameters, acting on `n` observations at once."""

    def __init__(self, spec: PolicySpec, n: int) -> None:
        self.spec = spec
        self.params = np.zeros((n, spec.num_params), np.float32)
        self._layers = unflatten(spec, self.params)

    def set(self, i: int, flat: np.ndarray) -> None:
        self.params[i] = flat

    def act(self, obs: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Actions for observations (already normalized) of all n policies [n, D], or of the
        policies `rows` [len(rows), D]."""
        layers = self._layers if rows is None else unflatten(self.spec, self.params[rows])
        return to_actions(self.spec, forward(layers, obs, self.spec.activation))


class Policy:
    """One policy on a batch of observations (what the evaluator runs)."""

    def __init__(self, spec: PolicySpec, flat: np.ndarray) -> None:
        self.spec = spec
        self._layers = unflatten(spec, np.asarray(flat, np.float32))

    def act(self, obs: np.ndarray) -> np.ndarray:
        return to_actions(self.spec, forward(self._layers, obs, self.spec.activation))

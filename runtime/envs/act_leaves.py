"""Actions that are not one Discrete (from 0) or one 1-D float Box: MultiDiscrete, MultiBinary, a
Box of any shape, a Discrete with a `start`, and Dict and Tuple of these, nested.

Such a space is a list of leaves, each a path into the action ("arm", "0", "grip.force"; "" for a
space that is itself one leaf) and a kind:

- "categorical": a Discrete (one column), a MultiDiscrete (a column per entry), a MultiBinary (a
  column per bit, two values each); `nvec` says how many values each column takes;
- "gaussian": a float Box, flattened (`width` columns), sampled from a diagonal Gaussian.

An action travels and trains as one float32 row (`ActionLayout`): every categorical column first,
in leaf order, as its index from 0 (a whole number), then every Gaussian column (the unclipped
sample). The policy head gives each categorical column its logits and each Gaussian column its
mean; the columns are independent given the observation, so an action's log-probability (and the
policy's entropy) is the sum over its columns (networks.py, policy.py). `to_env` turns a row into
what the environment's `step` takes: starts added, shapes and dtypes restored, Boxes clipped to
their bounds, Dicts and Tuples rebuilt.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from surreal.runtime.envs.obs_leaves import Leaf, children

CATEGORICAL, GAUSSIAN = "categorical", "gaussian"
MAX_VALUES = 1 << 24  # values of one categorical column: float32 holds every index below exactly


@dataclass(frozen=True)
class ActLeaf(Leaf):
    nvec: tuple[int, ...] = ()
    """categorical: how many values each of its columns takes."""
    width: int = 0
    """gaussian: its columns (the Box's size)."""

    what = "act_leaves"

    @property
    def columns(self) -> int:
        return len(self.nvec) if self.kind == CATEGORICAL else self.width

    @property
    def where(self) -> str:
        return f"action key {self.path!r}" if self.path else "the action"

    def validate(self) -> None:
        where = f"act_leaves[{self.path or '(root)'}]"
        if self.kind == CATEGORICAL:
            if not self.nvec or self.width or not all(1 <= n <= MAX_VALUES for n in self.nvec):
                raise ValueError(
                    f"{where}: a categorical leaf gives nvec, each in [1, {MAX_VALUES}], and no width"
                )
        elif self.kind == GAUSSIAN:
            if self.width < 1 or self.nvec:
                raise ValueError(f"{where}: a gaussian leaf gives a positive width and no nvec")
        else:
            raise ValueError(f"{where}: kind must be {CATEGORICAL} or {GAUSSIAN}, got {self.kind!r}")


def is_plain(space: gym.Space) -> bool:
    """A Discrete from 0 or a 1-D float Box: the action is the network's own (an int64 index, or a
    float32 vector) and needs no leaves."""
    if isinstance(space, gym.spaces.Discrete):
        return int(space.start) == 0
    return isinstance(space, gym.spaces.Box) and len(space.shape) == 1 and _float_box(space)


def _float_box(space: gym.spaces.Box) -> bool:
    return bool(np.issubdtype(space.dtype, np.floating))


def describe(space: gym.Space, path: str = "") -> list[ActLeaf]:
    """The leaves of an action space, in order (Dict keys in the space's order). ValueError naming
    the part no policy here can produce."""
    where = f"action key {path!r}" if path else "the action space"
    parts = children(space, path)
    if parts is not None:
        for key, _, _ in parts:
            if "." in key:
                raise ValueError(f"{where} has the key {key!r}, with a dot: paths here join keys with dots")
        return [leaf for _, at, sub in parts for leaf in describe(sub, at)]
    if isinstance(space, gym.spaces.Discrete):
        nvec: tuple[int, ...] = (int(space.n),)
    elif isinstance(space, gym.spaces.MultiDiscrete):
        nvec = tuple(int(v) for v in np.ravel(space.nvec))
    elif isinstance(space, gym.spaces.MultiBinary):
        nvec = (2,) * int(np.prod(space.shape))
    elif isinstance(space, gym.spaces.Box):
        if not _float_box(space):
            raise ValueError(f"{where} is a Box of {space.dtype}, which no policy here samples: a float Box "
                             "(Gaussian) or a Discrete/MultiDiscrete (categorical) can be")  # fmt: skip
        return [ActLeaf(path, GAUSSIAN, width=max(1, int(np.prod(space.shape))))]
    else:
        raise ValueError(f"{where} is a {type(space).__name__}, which no policy here can produce: give the "
                         "environment a wrapper whose actions are Discrete, MultiDiscrete, MultiBinary or "
                         "Box (or a Dict/Tuple of them)")  # fmt: skip
    if not nvec or max(nvec) > MAX_VALUES:
        raise ValueError(f"{where} has {max(nvec, default=0)} values in one part; a policy here takes "
                         f"1 to {MAX_VALUES}")  # fmt: skip
    return [ActLeaf(path, CATEGORICAL, nvec=nvec)]


class ActionLayout:
    """The columns of an action row, for leaves `leaves`: `nvec` of the categorical columns (K of
    them), then `gaussian` Gaussian columns; the head's output holds every categorical column's
    logits (sum(nvec)), then the Gaussian means. `cat_index` [K, max n] gathers each column's
    logits from the head output (padded where a column has fewer values: `pad`)."""

    def __init__(self, leaves: Sequence[ActLeaf]) -> None:
        self.leaves = tuple(leaves)
        self.nvec = tuple(n for leaf in leaves if leaf.kind == CATEGORICAL for n in leaf.nvec)
        self.gaussian = sum(leaf.width for leaf in leaves if leaf.kind == GAUSSIAN)
        self.columns = len(self.nvec) + self.gaussian
        self.logits = int(sum(self.nvec))
        self.head_dim = self.logits + self.gaussian
        widest = max(self.nvec, default=0)
        offsets = np.cumsum((0, *self.nvec))[:-1]
        values = np.arange(widest)
        self.pad = values[None, :] >= np.array(self.nvec, np.int64).reshape(-1, 1)  # [K, max n]
        self.cat_index = np.where(self.pad, 0, offsets.reshape(-1, 1) + values[None, :]).astype(np.int64)
        self.padded = bool(self.pad.any())
        self.values = np.array(self.nvec, np.int64)  # nvec as an array, for the hot paths
        # the leaf each column belongs to, for errors
        self._column_leaf = [leaf for leaf in leaves if leaf.kind == CATEGORICAL for _ in leaf.nvec]
        self._column_leaf += [leaf for leaf in leaves if leaf.kind == GAUSSIAN for _ in range(leaf.width)]

    def column_logits(self, out: np.ndarray) -> np.ndarray:
        """Each categorical column's logits [B, K, max n] from head outputs `out` [B, head_dim]
        (a copy; -inf past a column's values): what PPO samples from and ES takes the argmax of."""
        logits = out[:, self.cat_index]
        if self.padded:
            logits[:, self.pad] = -np.inf
        return logits

    def categorical_problem(self, actions: np.ndarray) -> str | None:
        """Why float rows `actions` [..., columns] hold no honest actor's categorical columns (an
        index that is not a whole number in [0, n)), or None."""
        k = len(self.nvec)
        if not k or not actions.size:
            return None
        cols = actions[..., :k].reshape(-1, k)
        bad = (cols != np.floor(cols)) | (cols < 0) | (cols >= self.values)
        if not bad.any():
            return None
        column = int(np.flatnonzero(bad.any(axis=0))[0])
        leaf = self._column_leaf[column]
        value = cols[bad[:, column], column][0]
        return f"{leaf.where}: {value:g} is not one of its {self.nvec[column]} values"

    def to_env(self, space: gym.Space, row: np.ndarray) -> Any:
        """One action row [columns] as `space` takes it."""
        cursor = [0, len(self.nvec)]  # next categorical column, next Gaussian column
        return _build(space, row, cursor)


def _build(space: gym.Space, row: np.ndarray, cursor: list[int]) -> Any:
    if isinstance(space, gym.spaces.Dict):
        return {key: _build(sub, row, cursor) for key, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_build(sub, row, cursor) for sub in space.spaces)
    if isinstance(space, gym.spaces.Box):
        size = max(1, int(np.prod(space.shape)))
        values = row[cursor[1] : cursor[1] + size]
        cursor[1] += size
        low, high = space.low.reshape(-1), space.high.reshape(-1)
        return np.clip(values, low, high).astype(space.dtype).reshape(space.shape)
    if isinstance(space, gym.spaces.Discrete):
        cursor[0] += 1
        return int(row[cursor[0] - 1]) + int(space.start)
    size = int(np.prod(space.shape or ()))
    index = row[cursor[0] : cursor[0] + size].astype(np.int64).reshape(space.shape)
    cursor[0] += size
    if isinstance(space, gym.spaces.MultiDiscrete):
        return (index + getattr(space, "start", 0)).astype(space.dtype)
    return index.astype(space.dtype)  # MultiBinary


@functools.lru_cache(maxsize=32)
def layout(leaves: tuple[ActLeaf, ...]) -> ActionLayout:
    """The ActionLayout of `leaves` (one per distinct leaves in a process)."""
    return ActionLayout(leaves)

"""Observations that are not one Box: Discrete, MultiDiscrete, MultiBinary, and Dict and Tuple of
these and of Boxes, nested (MiniGrid's image and direction, FrozenLake's cell, Blackjack's tuple,
goal-conditioned robotics' observation/achieved_goal/desired_goal).

Such a space is a list of leaves, each a path into the observation ("image", "0",
"observation.pos"; "" for a space that is itself one leaf) and a kind:

- "vector": a Box that is not an image, flattened to float32 [D]: the only leaves normalized;
- "image": a uint8 Box of rank 2 or 3 (image_layout), as (C, H, W); at most one per policy;
- "discrete": Discrete or MultiDiscrete, as int64 [k] from 0 (the space's `start` subtracted);
- "binary": MultiBinary, as uint8 [n] of 0 and 1.

Each leaf travels as its own tensor (fragment.py), in its own dtype, and is checked as what it is.
The networks take one float32 row per observation (`pack`): the leaves in order, a vector as it
is, a discrete entry one-hot, a binary one as 0.0/1.0, an image flattened with its raw 0-255
values (the network scales it and gives it to its CNN: networks.MixedActorCritic). A space
holding anything else (a Text, a Graph, a Sequence) is described too, as an "unsupported" leaf,
so that the error can name the key and how to leave it out (`obs_keys`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Self

import gymnasium as gym
import numpy as np

KINDS = ("vector", "image", "discrete", "binary")
UNSUPPORTED = "unsupported"
DTYPES = {"vector": np.float32, "image": np.uint8, "discrete": np.int64, "binary": np.uint8}


@dataclass(frozen=True)
class Leaf:
    """What an observation's leaf (ObsLeaf) and an action's (act_leaves.ActLeaf) share: where it
    is, what it is, and its plain values in the spec file."""

    path: str
    """Where the leaf is: Dict keys and Tuple indices joined by "."."""
    kind: str
    """What it is: one of KINDS or "unsupported" (ObsLeaf), CATEGORICAL or GAUSSIAN (ActLeaf)."""

    what = ""  # the spec file's key that lists such leaves, for errors

    def validate(self) -> None:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """Plain values for the spec file (what was left at its default left out)."""
        return {
            k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(self).items() if v not in ("", (), 0)
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Inverse of to_dict; ValueError naming what does not fit."""
        types = {f.name: str(f.type) for f in fields(cls)}
        unknown = set(data) - set(types)
        if unknown:
            raise ValueError(f"{cls.what}: unknown keys {sorted(unknown)}")
        try:
            leaf = cls(**{"path": "", **{k: _plain(types[k], v) for k, v in data.items()}})
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{cls.what}: {dict(data)} is not a leaf ({exc})") from None
        leaf.validate()
        return leaf


def _plain(kind: str, value: Any) -> Any:
    if kind.startswith("tuple"):
        return tuple(int(v) for v in value)
    return int(value) if kind == "int" else str(value)


@dataclass(frozen=True)
class ObsLeaf(Leaf):
    shape: tuple[int, ...] = ()
    """As it travels: vector (D,), image (C, H, W), discrete (k,), binary (n,)."""
    nvec: tuple[int, ...] = ()
    """discrete: how many values each of its k entries takes."""
    start: tuple[int, ...] = ()
    """discrete: the lowest value of each entry."""
    layout: str = ""
    """image: how the environment gives it ("hwc", "chw" or "hw": image_layout)."""
    space: str = ""
    """unsupported: the space, as text."""

    what = "obs_leaves"

    @property
    def name(self) -> str:
        """Its tensor's name on the wire: "obs", or "obs.<path>"."""
        return f"obs.{self.path}" if self.path else "obs"

    @property
    def top(self) -> str:
        """The top-level key it lies under (what `obs_keys` selects)."""
        return self.path.split(".", 1)[0]

    @property
    def width(self) -> int:
        """Its columns in a packed row."""
        if self.kind == "discrete":
            return int(sum(self.nvec))
        return int(np.prod(self.shape)) if self.shape else 0

    @property
    def dtype(self) -> type[np.generic]:
        return DTYPES[self.kind]  # type: ignore[return-value]

    def validate(self) -> None:
        where = f"obs_leaves[{self.path or '(root)'}]"
        if self.kind not in (*KINDS, UNSUPPORTED):
            raise ValueError(
                f"{where}: kind must be one of {', '.join(KINDS)} or {UNSUPPORTED}, got {self.kind!r}"
            )
        if self.kind == UNSUPPORTED:
            return
        if not self.shape or min(self.shape) < 1:
            raise ValueError(f"{where}: shape must be positive sizes, got {list(self.shape)}")
        expected_rank = {"image": 3, "vector": 1, "discrete": 1, "binary": 1}[self.kind]
        if len(self.shape) != expected_rank:
            raise ValueError(
                f"{where}: a {self.kind} leaf has rank {expected_rank}, got shape {list(self.shape)}"
            )
        if self.kind == "image" and self.layout not in ("hwc", "chw", "hw"):
            raise ValueError(f"{where}: layout must be hwc, chw or hw, got {self.layout!r}")
        if self.kind == "discrete" and not (
            len(self.nvec) == len(self.start) == self.shape[0] and min(self.nvec) >= 1
        ):
            raise ValueError(f"{where}: nvec and start must give each of the {self.shape[0]} entries")


def image_layout(space: gym.Space) -> tuple[str, tuple[int, int, int]] | None:
    """How a uint8 Box of rank 2 or 3 is an image: ("hw" | "hwc" | "chw", its (C, H, W)); None for
    a vector. Channels-last is recognised as gymnasium's pixel environments give it: at most 4
    channels after a larger height (ALE's (210, 160, 3)); frame stacks come channels-first."""
    if not isinstance(space, gym.spaces.Box):
        return None
    shape = tuple(int(s) for s in space.shape)
    if space.dtype != np.uint8 or len(shape) not in (2, 3):
        return None
    if len(shape) == 2:
        return "hw", (1, shape[0], shape[1])
    if shape[2] <= 4 < shape[0]:
        return "hwc", (shape[2], shape[0], shape[1])
    return "chw", (shape[0], shape[1], shape[2])


def children(space: gym.Space, path: str) -> list[tuple[str, str, gym.Space]] | None:
    """The parts of a Dict (in its order) or a Tuple at `path`: (key, their path, space) each; None
    for any other space. Paths join keys and indices with dots."""
    if isinstance(space, gym.spaces.Dict):
        return [(str(k), f"{path}.{k}" if path else str(k), sub) for k, sub in space.spaces.items()]
    if isinstance(space, gym.spaces.Tuple):
        return [(str(i), f"{path}.{i}" if path else str(i), sub) for i, sub in enumerate(space.spaces)]
    return None


def describe(space: gym.Space, path: str = "") -> list[ObsLeaf]:
    """The leaves of an observation space, in order (Dict keys in the space's order)."""
    parts = children(space, path)
    if parts is not None:
        dotted = [key for key, _, _ in parts if "." in key]
        if dotted:
            return [
                ObsLeaf(path or dotted[0], UNSUPPORTED, space=f"a Dict whose key {dotted[0]!r} has a dot")
            ]
        return [leaf for _, where, sub in parts for leaf in describe(sub, where)]
    if isinstance(space, gym.spaces.Box):
        image = image_layout(space)
        if image is not None:
            return [ObsLeaf(path, "image", image[1], layout=image[0])]
        return [ObsLeaf(path, "vector", (max(1, int(np.prod(space.shape))),))]
    if isinstance(space, gym.spaces.Discrete):
        return [ObsLeaf(path, "discrete", (1,), (int(space.n),), (int(space.start),))]
    if isinstance(space, gym.spaces.MultiDiscrete):
        nvec = tuple(int(v) for v in np.ravel(space.nvec))
        start = tuple(int(v) for v in np.ravel(getattr(space, "start", np.zeros_like(space.nvec))))
        return [ObsLeaf(path, "discrete", (len(nvec),), nvec, start)]
    if isinstance(space, gym.spaces.MultiBinary):
        return [ObsLeaf(path, "binary", (int(np.prod(space.shape)),))]
    kind = f"a {type(space).__name__}"
    if isinstance(space, gym.spaces.Text) and type(space) is not gym.spaces.Text:
        kind += " (a Text space)"
    return [ObsLeaf(path, UNSUPPORTED, space=kind)]


def select(leaves: Sequence[ObsLeaf], obs_keys: Iterable[str], env: str) -> tuple[ObsLeaf, ...]:
    """The leaves a policy observes: those under the top-level keys `obs_keys` (all when empty).
    ValueError naming the key, for a key the space lacks, a leaf no network here can encode, or
    more than one image."""
    keys = tuple(obs_keys)
    tops = list(dict.fromkeys(leaf.top for leaf in leaves))
    unknown = [k for k in keys if k not in tops]
    if unknown:
        raise ValueError(
            f"obs_keys {','.join(unknown)}: {env}'s observations have the keys {', '.join(tops)}"
        )
    kept = tuple(leaf for leaf in leaves if not keys or leaf.top in keys)
    for leaf in kept:
        if leaf.kind == UNSUPPORTED:
            where = f"observation key {leaf.path!r}" if leaf.path else "the observation"
            usable = [t for t in tops if all(x.kind != UNSUPPORTED for x in leaves if x.top == t)]
            if leaf.path and usable:
                how = f"leave it out with --set obs_keys={','.join(usable)} (or a wrapper that encodes it)"
            else:
                how = "give the environment a wrapper that encodes it as a Box or a Discrete"
            raise ValueError(f"{env}: {where} is {leaf.space}, which no network here can encode: {how}")
    images = [leaf.path for leaf in kept if leaf.kind == "image"]
    if len(images) > 1:
        raise ValueError(f"{env}: observation keys {', '.join(images)} are all images; a policy here "
                         "takes one: choose it with --set obs_keys=...")  # fmt: skip
    return kept


def leaf_value(obs: Any, path: str) -> Any:
    """The part of one raw observation (nested dicts and tuples) at `path`."""
    if not path:
        return obs
    for part in path.split("."):
        obs = obs[part] if isinstance(obs, Mapping) else obs[int(part)]
    return obs


def leaf_row(leaf: ObsLeaf, value: Any) -> np.ndarray:
    """One leaf of one raw observation as it travels (see the module docstring)."""
    if leaf.kind == "vector":
        return np.ravel(np.asarray(value, np.float32))
    if leaf.kind == "image":
        image = np.asarray(value)
        return np.moveaxis(image, -1, 0) if leaf.layout == "hwc" else image.reshape(leaf.shape)
    if leaf.kind == "discrete":
        return np.ravel(np.asarray(value, np.int64)) - np.asarray(leaf.start, np.int64)
    return np.ravel(np.asarray(value, np.uint8))


def empty(leaves: Sequence[ObsLeaf], *lead: int) -> dict[str, np.ndarray]:
    """Uninitialized leaf arrays [*lead, *shape] by wire name."""
    return {leaf.name: np.empty((*lead, *leaf.shape), leaf.dtype) for leaf in leaves}


def put(leaves: Sequence[ObsLeaf], out: dict[str, np.ndarray], index: Any, obs: Any) -> None:
    """Write one raw observation into row `index` of the leaf arrays `out`."""
    for leaf in leaves:
        out[leaf.name][index] = leaf_row(leaf, leaf_value(obs, leaf.path))


def row(obs: Mapping[str, np.ndarray], index: Any) -> dict[str, np.ndarray]:
    """Row `index` of every leaf array (copies)."""
    return {name: np.array(array[index]) for name, array in obs.items()}


def stack(rows: Sequence[Mapping[str, np.ndarray]], leaves: Sequence[ObsLeaf]) -> dict[str, np.ndarray]:
    """Rows (of `row`) as leaf arrays [len(rows), ...], also when there are none."""
    return {
        leaf.name: np.array([r[leaf.name] for r in rows], leaf.dtype).reshape(-1, *leaf.shape)
        for leaf in leaves
    }


def float_width(leaves: Sequence[ObsLeaf]) -> int:
    """Columns of the vector leaves: what observation normalization covers."""
    return sum(leaf.width for leaf in leaves if leaf.kind == "vector")


def _lead(leaves: Sequence[ObsLeaf], obs: Mapping[str, np.ndarray]) -> tuple[int, ...]:
    first = obs[leaves[0].name]
    return first.shape[: first.ndim - len(leaves[0].shape)]


def float_block(leaves: Sequence[ObsLeaf], obs: Mapping[str, np.ndarray]) -> np.ndarray:
    """The vector leaves side by side [..., float_width] (float32; a copy)."""
    parts = [obs[leaf.name] for leaf in leaves if leaf.kind == "vector"]
    if not parts:
        return np.zeros((*_lead(leaves, obs), 0), np.float32)
    return np.concatenate(parts, axis=-1).astype(np.float32)


def set_float_block(leaves: Sequence[ObsLeaf], obs: dict[str, np.ndarray], block: np.ndarray) -> None:
    """Write `block` [..., float_width] back into the vector leaves of `obs`."""
    at = 0
    for leaf in leaves:
        if leaf.kind == "vector":
            obs[leaf.name][...] = block[..., at : at + leaf.width]
            at += leaf.width


def image_slice(leaves: Sequence[ObsLeaf]) -> tuple[int, ObsLeaf] | None:
    """(its first column in a packed row, the leaf) of the image leaf, or None."""
    at = 0
    for leaf in leaves:
        if leaf.kind == "image":
            return at, leaf
        at += leaf.width
    return None


def pack(leaves: Sequence[ObsLeaf], obs: Mapping[str, np.ndarray]) -> np.ndarray:
    """The leaf arrays [*lead, ...] as the networks' float32 rows [*lead, width]."""
    lead = _lead(leaves, obs)
    width = sum(leaf.width for leaf in leaves)
    out = np.zeros((*lead, width), np.float32)
    flat = out.reshape(-1, width)
    at = 0
    for leaf in leaves:
        value = obs[leaf.name].reshape(-1, *leaf.shape)
        if leaf.kind == "discrete":
            offset = at
            for j, n in enumerate(leaf.nvec):
                flat[np.arange(len(flat)), offset + value[:, j]] = 1.0
                offset += n
        else:
            flat[:, at : at + leaf.width] = value.reshape(len(flat), leaf.width)
        at += leaf.width
    return out


def value_problem(leaf: ObsLeaf, name: str, array: np.ndarray, clip: float | None) -> tuple[str, str] | None:
    """Why the leaf values `array` are not ones an honest actor sends, as (reason, detail) in
    fragment.REJECT_REASONS' words, or None: a discrete entry outside its range, a binary one not
    0 or 1, a vector value that is not finite or, normalized, beyond `clip`."""
    if not array.size:
        return None
    if leaf.kind == "discrete":
        flat = array.reshape(-1, leaf.shape[0])
        if flat.min() < 0 or (flat >= np.asarray(leaf.nvec)).any():
            return "out_of_range", f"{name} has a value outside [0, n) for nvec {list(leaf.nvec)}"
    elif leaf.kind == "binary":
        if array.max() > 1:
            return "out_of_range", f"{name} has a value that is not 0 or 1"
    elif leaf.kind == "vector":
        if not np.isfinite(array).all():
            return "non_finite", f"{name} has NaN or infinite values"
        if clip is not None and np.abs(array).max() > clip * (1 + 1e-6):
            return "out_of_range", f"normalized {name} beyond obs_clip={clip:g}"
    return None


def summary(leaves: Sequence[ObsLeaf]) -> str:
    """The leaves in a few words: "image (image 3x7x7), direction (discrete 4)"."""

    def kind(leaf: ObsLeaf) -> str:
        if leaf.kind == "discrete":
            return f"discrete {'x'.join(map(str, leaf.nvec))}"
        if leaf.kind == UNSUPPORTED:
            return leaf.space
        return f"{leaf.kind} {'x'.join(map(str, leaf.shape))}"

    return ", ".join(f"{leaf.path or 'obs'} ({kind(leaf)})" for leaf in leaves)

"""Image observations on the wire as new frames: each frame once, whole stacks only where needed.

A frame-stacked observation [C, H, W] (channels first, the newest frame last, as gymnasium's
FrameStackObservation gives them) shares C-1 frames with the previous step's: most of a fragment's
obs bytes are copies. An actor sends instead

- `obs_frames` [T+1, N, H, W]: the newest frame (channel C-1) of every step's observation;
- `obs_keys` [K, C-1, H, W]: the older C-1 frames of each observation that is NOT the previous
  step's shifted by one frame (row 0 of every env, the reset after an episode ended, or any stack
  that does not shift), and `obs_key_index` [K, 2]: their (t, n), in row-major order.

The learner rebuilds every other observation as the previous one shifted by one frame plus its new
frame. "Is a shift" is decided by comparing with the actual previous observation, never from what a
wrapper is assumed to do, so the round trip is bit-exact for any sequence (resets anywhere, any
padding at reset, an image that is not a stack at all, C=1). Everything here is pure numpy.
"""

from __future__ import annotations

import numpy as np

WIRE_TENSORS = ("obs_frames", "obs_keys", "obs_key_index")


def wire_names(name: str = "obs") -> tuple[str, str, str]:
    """The three tensors of the images called `name` ("obs"; an image leaf's "obs.<path>")."""
    return f"{name}_frames", f"{name}_keys", f"{name}_key_index"


def key_rows(obs: np.ndarray) -> np.ndarray:
    """Which observations of `obs` [T+1, N, C, H, W] must travel whole, as a bool [T+1, N]: row 0,
    and every one that differs from its predecessor shifted by one frame. One comparison per step
    (a loop over T): the temporaries stay the size of one row of observations."""
    t1, n, c = obs.shape[:3]
    key = np.ones((t1, n), bool)
    for t in range(1, t1):
        key[t] = (obs[t, :, : c - 1] != obs[t - 1, :, 1:]).reshape(n, -1).any(axis=1)
    return key


def encode_stacks(obs: np.ndarray, name: str = "obs") -> dict[str, np.ndarray]:
    """The wire tensors of the uint8 observations `obs` [T+1, N, C, H, W] (see the module
    docstring; named after `name`: wire_names); `rebuild_stacks` inverts it exactly."""
    c = obs.shape[2]
    index = np.argwhere(key_rows(obs)).astype(np.int64).reshape(-1, 2)  # row-major: sorted by (t, n)
    frames, keys, key_index = wire_names(name)
    return {
        frames: np.ascontiguousarray(obs[:, :, c - 1]),
        keys: obs[index[:, 0], index[:, 1], : c - 1],
        key_index: index,
    }


def stacks_problem(t: dict[str, np.ndarray], image_shape: tuple[int, ...], name: str = "obs") -> str | None:
    """Why the wire tensors of `t` do not describe observations of `image_shape` [C, H, W] for its
    T steps of N envs (from `rewards` [T, N]), or None. Checked before `rebuild_stacks` allocates or
    indexes anything: shapes and dtypes, each index in range, keys in strictly increasing row-major
    order (so none is duplicated), and row 0 of every env among them."""
    names = wire_names(name)
    if any(n not in t for n in names) or name in t:
        return f"image observations travel as {', '.join(names)} (and no {name})"
    frames, keys, index, rewards = t[names[0]], t[names[1]], t[names[2]], t["rewards"]
    c, h, w = image_shape
    if rewards.ndim != 2 or frames.shape != (rewards.shape[0] + 1, rewards.shape[1], h, w):
        return f"{names[0]} {frames.shape} does not fit rewards {rewards.shape} and {h}x{w} frames"
    if frames.dtype != np.uint8 or keys.dtype != np.uint8 or index.dtype.kind not in "iu":
        return f"{names[0]}/{names[1]} are not uint8 or {names[2]} is not integer"
    if keys.shape[1:] != (c - 1, h, w) or index.shape != (len(keys), 2):
        return f"{names[1]} {keys.shape} / {names[2]} {index.shape} do not fit {c}-frame stacks"
    t1, n = frames.shape[:2]
    if len(index) and (index.min() < 0 or index[:, 0].max() >= t1 or index[:, 1].max() >= n):
        return f"{names[2]} out of range"
    flat = index[:, 0].astype(np.int64) * n + index[:, 1]
    if (np.diff(flat) <= 0).any():
        return f"{names[2]} is not in strictly increasing (t, n) order (or has duplicates)"
    if np.count_nonzero(index[:, 0] == 0) != n:
        return f"{names[2]} does not list row 0 of every env"
    return None


def rebuild_stacks(frames: np.ndarray, keys: np.ndarray, index: np.ndarray) -> np.ndarray:
    """The observations [T+1, N, C, H, W] that `encode_stacks` encoded (`stacks_problem` passed):
    row by row, every env's previous observation shifted by one frame, then the keys of that row
    over their envs' older frames; the newest frame of every observation is its `obs_frames` entry."""
    t1, n, h, w = frames.shape
    c = keys.shape[1] + 1
    obs = np.empty((t1, n, c, h, w), np.uint8)
    obs[:, :, c - 1] = frames
    bounds = np.searchsorted(index[:, 0], np.arange(t1 + 1))  # keys of row t: bounds[t]:bounds[t+1]
    for t in range(t1):
        if t:
            obs[t, :, : c - 1] = obs[t - 1, :, 1:]
        lo, hi = bounds[t], bounds[t + 1]
        if hi > lo:
            obs[t, index[lo:hi, 1], : c - 1] = keys[lo:hi]
    return obs


def with_stacks(t: dict[str, np.ndarray], name: str = "obs") -> dict[str, np.ndarray]:
    """`t` with its wire tensors replaced by the rebuilt `name` (after `stacks_problem` passed)."""
    names = wire_names(name)
    out = {k: v for k, v in t.items() if k not in names}
    out[name] = rebuild_stacks(*(t[n] for n in names))
    return out

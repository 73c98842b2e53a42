"""Running mean/variance kept as (count, mean, m2) moments so partial statistics merge exactly.

Actors compute the moments of what they saw in a fragment; the learner merges them with the
parallel form of Welford's algorithm (Chan et al., 1979), so the merged statistics equal those of
the concatenated data no matter how it was split.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Moments:
    """Sufficient statistics of a sample: size, mean and sum of squared deviations (m2)."""

    count: float
    mean: np.ndarray
    m2: np.ndarray


def batch_moments(x: np.ndarray) -> Moments:
    """Moments of `x` along axis 0, in float64."""
    x = np.asarray(x, np.float64)
    mean = x.mean(axis=0)
    return Moments(float(x.shape[0]), mean, ((x - mean) ** 2).sum(axis=0))


def valid_moments(m: Moments) -> bool:
    """Moments some real sample could have: finite, count > 0 and m2 >= 0 (or all empty)."""
    if not (math.isfinite(m.count) and m.count >= 0):
        return False
    return bool(np.isfinite(m.mean).all() and np.isfinite(m.m2).all() and (m.m2 >= 0).all())


def merge_moments(a: Moments, b: Moments) -> Moments:
    """Moments of the union of the two samples `a` and `b` describe."""
    count = a.count + b.count
    if count == 0:
        return a
    delta = b.mean - a.mean
    mean = a.mean + delta * (b.count / count)
    m2 = a.m2 + b.m2 + delta**2 * (a.count * b.count / count)
    return Moments(count, mean, m2)


class ObsNormalizer:
    """Fixed (x - mean) / std clipped to [-clip, clip] in float32: what actors apply per step."""

    def __init__(self, mean: np.ndarray, var: np.ndarray, clip: float) -> None:
        self.mean = np.asarray(mean, np.float32)
        self.inv_std = (1.0 / np.sqrt(np.asarray(var, np.float64) + 1e-8)).astype(np.float32)
        self.clip = clip

    def __call__(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        out = np.subtract(x, self.mean, out=out, dtype=np.float32)
        np.multiply(out, self.inv_std, out=out)
        return np.clip(out, -self.clip, self.clip, out=out)


class RunningMeanStd:
    """Mean and variance of everything merged so far; the variance is 1 before any data."""

    def __init__(self, shape: tuple[int, ...] = ()) -> None:
        self.moments = Moments(0.0, np.zeros(shape, np.float64), np.zeros(shape, np.float64))

    @property
    def count(self) -> float:
        return self.moments.count

    @property
    def mean(self) -> np.ndarray:
        return self.moments.mean

    @property
    def var(self) -> np.ndarray:
        m = self.moments
        return m.m2 / m.count if m.count > 0 else np.ones_like(m.m2)

    def merge(self, other: Moments) -> bool:
        """Merge `other` unless it, or the result, is not a valid sample's moments (a negative or
        non-finite count, mean or m2): the statistics stay finite whatever arrives. True if merged
        (or empty)."""
        if other.count == 0:
            return True
        if not valid_moments(other):
            return False
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow is caught just below
            merged = merge_moments(self.moments, other)
        if not valid_moments(merged):
            return False
        self.moments = merged
        return True

    def to_arrays(self, prefix: str) -> dict[str, np.ndarray]:
        """The moments as float64 arrays `<prefix>_count` [1], `_mean`, `_m2` for the wire."""
        m = self.moments
        return {
            f"{prefix}_count": np.array([m.count], np.float64),
            f"{prefix}_mean": np.asarray(m.mean, np.float64),
            f"{prefix}_m2": np.asarray(m.m2, np.float64),
        }

    @staticmethod
    def moments_from_arrays(arrays: dict[str, np.ndarray], prefix: str) -> Moments:
        """Inverse of `to_arrays` (copies, so the result does not alias a wire buffer)."""
        return Moments(
            float(arrays[f"{prefix}_count"][0]),
            np.array(arrays[f"{prefix}_mean"], np.float64),
            np.array(arrays[f"{prefix}_m2"], np.float64),
        )


def discounted_return_trace(
    rewards: np.ndarray, dones: np.ndarray, running: np.ndarray, gamma: float
) -> tuple[np.ndarray, np.ndarray]:
    """Running discounted returns G_t = gamma * G_{t-1} + r_t along axis 0, reset after a done.

    rewards, dones: [T, N]; running: [N], the G carried over from the previous fragment. Returns
    (G [T, N], the G to carry into the next fragment). Reward scaling divides rewards by the std
    of these G (as gym's NormalizeReward does), which keeps value targets near unit scale.
    """
    trace = np.empty(rewards.shape, np.float64)
    g = running
    for t in range(rewards.shape[0]):
        g = gamma * g + rewards[t]
        trace[t] = g
        g = np.where(dones[t], 0.0, g)
    return trace, g

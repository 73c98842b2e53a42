"""The ES update as pure functions: fitness shaping, the gradient estimate, Adam.

Salimans et al. 2017 ("Evolution Strategies as a Scalable Alternative to Reinforcement
Learning"): for perturbations eps_i ~ N(0, I) evaluated in antithetic pairs at theta +/- sigma eps_i,

    grad E[F(theta + sigma eps)] ~= 1 / (2 N sigma) * sum_i (F+_i - F-_i) eps_i,
    F+_i = F(theta + sigma eps_i),  F-_i = F(theta - sigma eps_i),

with the raw returns F replaced by their centered ranks, which makes the update invariant to the
scale of the returns and robust to outliers.
"""

from __future__ import annotations

import math

import numpy as np


def centered_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks of the entries of `x` scaled to [-0.5, 0.5] (same shape, float64).

    Equal entries share their average rank, so a pair whose two episodes scored the same (common
    once CartPole is solved) gets zero weight instead of a weight decided by the sort order.
    """
    flat = np.asarray(x, np.float64).ravel()
    n = flat.size
    if n <= 1:
        return np.zeros(np.shape(x))
    _, inverse, counts = np.unique(flat, return_inverse=True, return_counts=True)
    first = np.cumsum(counts) - counts  # rank of the first occurrence of each distinct value
    ranks = (first + (counts - 1) / 2.0)[inverse]
    return (ranks / (n - 1) - 0.5).reshape(np.shape(x))


def top_pairs(returns: np.ndarray, fraction: float) -> np.ndarray:
    """Indices of the best `fraction` of pairs (at least one) by the better of their two returns,
    as ARS's top-b directions; all indices when fraction is 1. returns: [N, 2]."""
    n = len(returns)
    keep = max(1, math.ceil(fraction * n))
    if keep >= n:
        return np.arange(n)
    best = np.max(returns, axis=1)
    return np.sort(np.argsort(-best, kind="stable")[:keep])


def es_gradient(shaped: np.ndarray, noise: np.ndarray, sigma: float) -> np.ndarray:
    """The antithetic estimate of the gradient of the smoothed objective.

    shaped: [N, 2] shaped fitness of (theta + sigma eps_i, theta - sigma eps_i); noise: [N, P]
    the eps_i. Returns [P] float64: sum_i (shaped[i, 0] - shaped[i, 1]) eps_i / (2 N sigma).
    """
    n = len(shaped)
    weights = np.asarray(shaped[:, 0] - shaped[:, 1], np.float64)
    return weights @ np.asarray(noise, np.float64) / (2.0 * n * sigma)


def adam_step(
    theta: np.ndarray,
    grad: np.ndarray,
    m: np.ndarray,
    v: np.ndarray,
    t: int,
    lr: float,
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One Adam step *descending* `grad` (Kingma & Ba, 2015); `t` counts steps from 1.
    Returns the new (theta, m, v); the inputs are not modified."""
    m = beta1 * m + (1.0 - beta1) * grad
    v = beta2 * v + (1.0 - beta2) * grad * grad
    step = lr * math.sqrt(1.0 - beta2**t) / (1.0 - beta1**t)
    return theta - step * m / (np.sqrt(v) + eps), m, v


def ascent_direction(
    returns: np.ndarray, noise: np.ndarray, sigma: float, top_fraction: float = 1.0
) -> np.ndarray:
    """Centered-rank ES gradient estimate from raw pair returns [N, 2] and their noise [N, P]."""
    keep = top_pairs(returns, top_fraction)
    return es_gradient(centered_ranks(returns[keep]), noise[keep], sigma)

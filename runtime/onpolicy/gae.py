"""Generalized advantage estimation: what the on-policy learner computes for every fragment."""

from __future__ import annotations

import numpy as np


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    bootstrap_value: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    trunc_values: np.ndarray,
    gamma: float,
    lam: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Advantages and returns [T, N] of a fragment (Schulman et al., 2016).

    rewards, values, terminated, truncated, trunc_values: [T, N]; bootstrap_value: [N] is the
    value of the observation after the last step. At a terminated step the next value is 0; at a
    truncated step it is trunc_values[t] (the value of the episode's final observation, since the
    next row is already the reset observation). Neither lets advantages flow across the boundary.
    """
    terminated = terminated.astype(bool)
    truncated = truncated.astype(bool)
    next_values = np.concatenate([values[1:], bootstrap_value[None]], axis=0)
    next_values = np.where(truncated, trunc_values, next_values)
    next_values = np.where(terminated, 0.0, next_values)
    deltas = rewards + gamma * next_values - values
    carry = gamma * lam * ~(terminated | truncated)
    advantages = np.empty_like(deltas)
    last = np.zeros_like(bootstrap_value, dtype=deltas.dtype)
    for t in range(rewards.shape[0] - 1, -1, -1):
        last = deltas[t] + carry[t] * last
        advantages[t] = last
    return advantages, advantages + values

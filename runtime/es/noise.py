"""Perturbations named by seeds: the master hands out seeds, workers draw the noise from them.

No noise table travels or is shared: a seed and the parameter count determine the perturbation
bit for bit in any process (numpy's PCG64 and its float32 normal sampler are platform-independent).
Which seeds an agent may use is a pure function of the version's nonce, the agent and the pair
index, so the master can check a reported seed in O(1) without a table of what it handed out.
"""

from __future__ import annotations

import numpy as np

_MASK64 = (1 << 64) - 1
_MASK63 = (1 << 63) - 1  # seeds travel as int64 and must stay non-negative


def _splitmix64(x: int) -> int:
    """One round of SplitMix64 (Steele et al., 2014): a cheap, well-mixing 64-bit bijection."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _mix(*words: int) -> int:
    h = 0
    for w in words:
        h = _splitmix64(h ^ (w & _MASK64))
    return h & _MASK63


def version_nonce(experiment_seed: int, version: int) -> int:
    """The nonce of one policy version's hand-out (shipped in Params.extras)."""
    return _mix(0x5EED, experiment_seed, version)


def pair_seed(nonce: int, agent_id: int, pair: int) -> int:
    """The seed of the `pair`-th perturbation handed to `agent_id` under `nonce`."""
    return _mix(nonce, agent_id, pair)


def env_seed(seed: int) -> int:
    """The env reset seed both episodes of a pair use (common random numbers: the two returns
    then differ by the perturbation, not by the start state)."""
    return seed & 0x7FFFFFFF


def perturbation(seed: int, num_params: int) -> np.ndarray:
    """The standard-normal perturbation [num_params] float32 that `seed` names."""
    return np.random.Generator(np.random.PCG64(seed)).standard_normal(num_params, dtype=np.float32)


def perturbations(seeds: np.ndarray, num_params: int) -> np.ndarray:
    """The perturbations of `seeds`, stacked: [len(seeds), num_params] float32."""
    out = np.empty((len(seeds), num_params), np.float32)
    for i, seed in enumerate(seeds.tolist()):
        out[i] = perturbation(seed, num_params)
    return out

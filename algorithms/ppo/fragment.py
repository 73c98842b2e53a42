"""The fragment an actor sends: its tensors (checked by the protocol against the schema) and
the consistency between them (checked by the learner)."""

from __future__ import annotations

import numpy as np

from surreal.algorithms.common.envs import EnvSpaces
from surreal.protocol.codec import TensorSpec


def experience_schema(spaces: EnvSpaces) -> dict[str, TensorSpec]:
    """The tensors of one fragment: T steps of N envs, K truncations, E finished episodes."""
    d, a = spaces.obs_dim, spaces.action_dim
    actions = TensorSpec("int64", (None, None)) if spaces.discrete else TensorSpec("float32", (None, None, a))
    return {
        "obs": TensorSpec("float32", (None, None, d)),  # [T+1, N, D] normalized; row T bootstraps
        "actions": actions,  # [T, N] or [T, N, A], unclipped samples
        "logprobs": TensorSpec("float32", (None, None)),  # behaviour policy log-probs [T, N]
        "rewards": TensorSpec("float32", (None, None)),  # raw rewards [T, N]
        "terminated": TensorSpec("bool", (None, None)),
        "truncated": TensorSpec("bool", (None, None)),
        "trunc_index": TensorSpec("int64", (None, 2)),  # (t, n) of each truncated step [K, 2]
        "trunc_obs": TensorSpec("float32", (None, d)),  # their final observations, normalized
        "obs_count": TensorSpec("float64", (1,)),  # moments of the raw observations seen
        "obs_mean": TensorSpec("float64", (d,)),
        "obs_m2": TensorSpec("float64", (d,)),
        "ret_count": TensorSpec("float64", (1,)),  # moments of the running discounted returns
        "ret_mean": TensorSpec("float64", (1,)),
        "ret_m2": TensorSpec("float64", (1,)),
        "episode_returns": TensorSpec("float64", (None,)),  # of episodes finished in the fragment
        "episode_lengths": TensorSpec("int64", (None,)),
    }


def check_fragment(t: dict[str, np.ndarray]) -> str | None:
    """Why the tensors of a fragment do not fit together, or None. (Each tensor's dtype and rank
    is checked by the protocol against the experience schema.)"""
    steps, envs = t["rewards"].shape
    if steps < 1 or envs < 1:
        return f"empty fragment {t['rewards'].shape}"
    if t["obs"].shape[:2] != (steps + 1, envs):
        return f"obs {t['obs'].shape} does not match rewards {(steps, envs)}"
    for name in ("actions", "logprobs", "terminated", "truncated"):
        if t[name].shape[:2] != (steps, envs):
            return f"{name} {t[name].shape} does not match rewards {(steps, envs)}"
    idx = t["trunc_index"]
    if len(idx) != len(t["trunc_obs"]) or len(t["episode_returns"]) != len(t["episode_lengths"]):
        return "trunc_index/trunc_obs or episode_returns/episode_lengths differ in length"
    if len(idx) and (idx.min() < 0 or idx[:, 0].max() >= steps or idx[:, 1].max() >= envs):
        return "trunc_index out of range"
    if not t["truncated"][idx[:, 0], idx[:, 1]].all() or len(idx) != t["truncated"].sum():
        return "trunc_index does not list exactly the truncated steps"
    return None

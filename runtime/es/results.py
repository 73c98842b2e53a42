"""What an ES worker sends up the experience stream: a batch of evaluated pairs and the moments
of the observations seen in exactly those pairs' episodes (so their count is the sum of the rows'
lengths). Every row names its agent, pair index, seed and policy version, so the master can check
each result on its own; a batch that does not fit together is rejected whole."""

from __future__ import annotations

import numpy as np

from surreal.protocol.codec import TensorSpec
from surreal.runtime.normalization import RunningMeanStd, valid_moments

RESULT_KEYS = ("agent_id", "pair", "seed", "version", "returns", "lengths")


def results_schema(obs_dim: int) -> dict[str, TensorSpec]:
    """The tensors of one result batch of R evaluated pairs."""
    return {
        "agent_id": TensorSpec("int64", (None,)),  # [R] the logical agent that evaluated the pair
        "pair": TensorSpec("int64", (None,)),  # [R] index of the pair among the agent's hand-out
        "seed": TensorSpec("int64", (None,)),  # [R] the perturbation's seed
        "version": TensorSpec("int64", (None,)),  # [R] policy version perturbed
        "returns": TensorSpec("float64", (None, 2)),  # [R, 2] returns at theta + / - sigma eps
        "lengths": TensorSpec("int64", (None, 2)),  # [R, 2] episode lengths, env steps
        "obs_count": TensorSpec("float64", (1,)),  # moments of the raw observations seen
        "obs_mean": TensorSpec("float64", (obs_dim,)),
        "obs_m2": TensorSpec("float64", (obs_dim,)),
    }


def check_batch(t: dict[str, np.ndarray], norm_obs: bool) -> tuple[str, str] | None:
    """(reason, detail) if the tensors of a batch do not fit together, else None. Dtypes and
    ranks are checked by the protocol against the schema; per-row checks (versions, seeds, NaN
    returns) are the master's. `norm_obs`: whether workers measure observations at all."""
    rows = len(t["agent_id"])
    for name in RESULT_KEYS[1:]:
        if len(t[name]) != rows:
            return "invalid", f"{name} has {len(t[name])} rows, agent_id {rows}"
    if rows and (t["lengths"].min() < 1 or t["agent_id"].min() < 0 or t["pair"].min() < 0):
        return "invalid", "lengths must be >= 1, agent_id and pair >= 0"
    m = RunningMeanStd.moments_from_arrays(t, "obs")
    expected = float(t["lengths"].sum()) if norm_obs else 0.0
    if m.count != expected:
        return "bad_moments", f"obs_count is {m.count:g}, the rows' lengths sum to {expected:g}"
    if not valid_moments(m):
        return "bad_moments", "observation moments are not finite, or m2 is negative"
    return None


def pack_batch(rows: list[tuple[int, int, int, int, float, float, int, int]],
               obs_moments: dict[str, np.ndarray]) -> dict[str, np.ndarray]:  # fmt: skip
    """Tensors of a batch from rows (agent_id, pair, seed, version, ret+, ret-, len+, len-)."""
    cols = list(zip(*rows, strict=True)) if rows else [()] * 8
    return {
        "agent_id": np.array(cols[0], np.int64),
        "pair": np.array(cols[1], np.int64),
        "seed": np.array(cols[2], np.int64),
        "version": np.array(cols[3], np.int64),
        "returns": np.array(list(zip(cols[4], cols[5], strict=True)), np.float64).reshape(-1, 2),
        "lengths": np.array(list(zip(cols[6], cols[7], strict=True)), np.int64).reshape(-1, 2),
        **obs_moments,
    }

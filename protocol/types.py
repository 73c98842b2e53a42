"""The values that travel over the protocol, as plain Python (no protobuf, no grpc)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# eq=False: the fields hold numpy arrays, whose `==` is element-wise, so generated equality and
# hashing would raise; identity is the only meaningful equality for these.


@dataclass(frozen=True, eq=False)
class Params:
    """A policy snapshot published by the learner."""

    # Monotonic policy version; actors tag their fragments with it.
    version: int
    # Network weights by parameter name.
    weights: dict[str, np.ndarray]
    # Anything else actors need with the weights, e.g. observation-normalization statistics.
    extras: dict[str, np.ndarray]


@dataclass(frozen=True, eq=False)
class Fragment:
    """A slice of experience received from an actor worker."""

    # The worker_id the stream introduced itself with (Hello).
    worker_id: str
    # Version of the policy that collected this experience.
    policy_version: int
    # Tensors by name, validated against the server's experience schema; read-only arrays.
    tensors: dict[str, np.ndarray]


@dataclass(frozen=True)
class EvalReport:
    """One deterministic evaluation of a policy, sent by the evaluator."""

    # Policy version that was evaluated.
    policy_version: int
    # Learner env steps at the time of that version.
    env_steps: int
    # Mean and standard deviation of the undiscounted episode return.
    mean_return: float
    std_return: float
    # Number of evaluation episodes.
    episodes: int
    # Mean episode length in env steps.
    mean_length: float


@dataclass(frozen=True)
class ReplayState:
    """What a replay shard holds now (its counters since its first start)."""

    size: int = 0
    inserted: int = 0
    sampled: int = 0
    restored: int = 0
    lost: int = 0
    refused: int = 0  # fragments refused for their contents
    malformed: int = 0  # streams ended for a fragment of the wrong shape or dtype
    # Calls its server refused before any fragment reached it (a learner's wire_rejections).
    unauthenticated: int = 0
    undecodable: int = 0
    too_many_streams: int = 0
    bad_samples: int = 0
    # What its actors said of their time with their fragments (Fragment.span_ms, waited_ms), summed.
    actor_span_ms: int = 0
    actor_waited_ms: int = 0


@dataclass(frozen=True, eq=False)
class Sampled:
    """A replay shard's answer to a sample: rows by field name, or None when its rate limiter held it."""

    rows: dict[str, np.ndarray] | None
    state: ReplayState
    episode_returns: tuple[float, ...] = ()  # training episodes that ended since the last answer

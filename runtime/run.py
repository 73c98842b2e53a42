"""What a component needs to run besides its algorithm config."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from surreal.runtime.envs.ref import EnvRef

# Learner ranks (ranks.py) are started by torch's elastic agent, which names each its rank. Read
# here, without torch, so that every component can ask whether it is one.
ENV_RANK = "RANK"
ENV_WORLD_SIZE = "WORLD_SIZE"
# Ranks across learner pods (ranks.py): the agent of each pod starts its ranks with RANK and
# WORLD_SIZE of its own pod; these make them the group's (global rank = RANK + offset).
ENV_RANK_OFFSET = "SURREAL_RANK_OFFSET"
ENV_GROUP_SIZE = "SURREAL_GROUP_SIZE"
# Set by the backend on each learner pod's container (ranks.Pods.from_environ): the learner pods
# of the experiment, pod 0's control store ("HOST:PORT"), and the first pod of the pod's Job (its
# pod is that plus its Job's completion index).
ENV_PODS = "SURREAL_LEARNER_PODS"
ENV_CONTROL = "SURREAL_RANKS_CONTROL"
ENV_POD = "SURREAL_LEARNER_POD"


class RoleFailed(RuntimeError):
    """The component's role has failed for good: it exits `code` (one of its role's fatal exits,
    policy.py) and leaves the message as its termination message, which says why (the local
    supervisor's `problem`, a pod's terminated state)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


# A learner rank's group, as the runtime raises it (ranks.py); here, without torch, so that what
# catches them (hooks.py) imports no torch.
class PeerLost(RuntimeError):
    """Another rank left or went silent: this group cannot update any more."""


class CollectiveFailed(RuntimeError):
    """A collective of this rank's group raised (gloo: a peer's connection closed, or the
    collective's timeout passed): a peer rank or pod is gone or hung. Unlike PeerLost, this rank
    may be part-way through an update, so it saves nothing and fails; its agent starts the group
    again from rank 0's last checkpoint."""


def rank_from_environ() -> tuple[int, int] | None:
    """(rank, world size) of the group from the elastic agent's variables, or None outside a
    group; with learner pods, the pod's agent's offset and the group's size make them global."""
    rank, size = os.environ.get(ENV_RANK), os.environ.get(ENV_WORLD_SIZE)
    if rank is None or size is None:
        return None
    offset, total = os.environ.get(ENV_RANK_OFFSET), os.environ.get(ENV_GROUP_SIZE)
    try:
        if offset is not None and total is not None:
            return int(rank) + int(offset), int(total)
        return int(rank), int(size)
    except ValueError:
        raise ValueError(f"{ENV_RANK}={rank!r}, {ENV_WORLD_SIZE}={size!r}, {ENV_RANK_OFFSET}={offset!r} and "
                         f"{ENV_GROUP_SIZE}={total!r} must be integers") from None  # fmt: skip


@dataclass(frozen=True)
class RunContext:
    """Built by the component entry point from the spec, flags and environment variables."""

    env_id: str  # gymnasium id ("CartPole-v1"), or a user's "module:EnvId" / "module:Class"
    seed: int  # experiment seed; components derive their own seeds from it
    total_steps: int  # env steps after which the learner finishes
    num_agents: int  # logical agents in the whole experiment
    exp_dir: Path  # experiment directory (status.json, checkpoints/, tb/)
    learner_addr: str  # "host:port" of the learner (of each rank, comma-separated); it listens on its port
    token: str  # per-experiment auth token
    index: int = 0  # this worker's index among the actor workers
    agents_in_worker: int = 1  # logical agents this worker hosts
    bind_all: bool = False  # learner listens on 0.0.0.0 (in a cluster) instead of the addr's host
    has_evaluator: bool = True  # False: the learner evaluates the final policy itself
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)  # the env constructor's kwargs
    learners: int = 1  # learner ranks (ranks.py); rank r listens on the r-th address
    rank: int = 0  # this learner's rank (learners only)
    replay_addr: str = ""  # "host:port" of each replay shard, comma-separated (off-policy runs)

    @property
    def env(self) -> EnvRef:
        """The environment every component of the run builds."""
        return EnvRef(self.env_id, self.env_kwargs)

    @property
    def learner_addrs(self) -> tuple[str, ...]:
        """Every learner rank's "host:port", by rank."""
        return tuple(a.strip() for a in self.learner_addr.split(","))

    def learner_for(self, worker_index: int) -> str:
        """The address of the rank that serves actor worker `worker_index` (index modulo ranks;
        the evaluator reports to rank 0)."""
        addrs = self.learner_addrs
        return addrs[worker_index % len(addrs)]

    @property
    def replay_addrs(self) -> tuple[str, ...]:
        """Every replay shard's "host:port", by shard index."""
        return tuple(a.strip() for a in self.replay_addr.split(",") if a.strip())

    def replay_for(self, worker_index: int) -> str:
        """The shard actor worker `worker_index` inserts into (index modulo shards)."""
        addrs = self.replay_addrs
        if not addrs:
            raise ValueError("this run has no replay shards (SURREAL_REPLAY_ADDR is not set)")
        return addrs[worker_index % len(addrs)]

    @property
    def learner_host(self) -> str:
        """Where this learner (rank) listens."""
        return self.learner_addrs[self.rank].rsplit(":", 1)[0]

    @property
    def learner_port(self) -> int:
        return int(self.learner_addrs[self.rank].rsplit(":", 1)[1])


# Every learner's Params.extras carry the run's progress, so actors and the evaluator know when
# to stop and how far along a policy version is without asking the status service.


def progress_extras(env_steps: int, done: bool) -> dict[str, np.ndarray]:
    return {"env_steps": np.array([env_steps], np.int64), "done": np.array([done], bool)}


def extras_env_steps(extras: Mapping[str, np.ndarray]) -> int:
    return int(extras["env_steps"][0])


def extras_done(extras: Mapping[str, np.ndarray]) -> bool:
    return bool(extras["done"][0])

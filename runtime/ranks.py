"""Learner ranks: N processes that train one policy together (data parallel), each fed by its own
share of the actors (worker index % N).

Every rank runs the whole learner loop: its own server, actors and batch. An update is collective:
the ranks combine their counters and normalization statistics, then sum gradients minibatch by
minibatch (`sum_grads`, the algorithm's reduce hook: api.Reduce; gloo on CPU), so that after every
update each rank holds the same weights, optimizer state and version. The group of one
(`RankGroup()`, a single learner) runs the same update with identity collectives.

An update is due when the group as a whole holds a batch (`add_steps` counts each rank's intake in
the store), whichever ranks' actors sent it: nothing waits for the slowest actor, and a rank whose
actors sent nothing takes part with no rows. Collectives start only once every rank has committed
to the same update (`commit`, then `all_committed`): keys in the store, polled without blocking, so
a waiting rank keeps serving and hears SIGTERM. A peer that stops heart-beating for
PEER_TIMEOUT_SECONDS, or leaves, ends the wait with `PeerLost`: the group is restarted
(orchestrator/rank_agent.py) and resumes from rank 0's checkpoint, which rank 0 broadcasts at start.
A group that does not form fails the learner at once (`GroupNotFormed`, EXIT_GROUP_NOT_FORMED,
restarted by nobody), naming the ranks that did not join or hung in init_process_group.

The group is formed from the elastic agent's variables (RANK, WORLD_SIZE, TORCHELASTIC_RUN_ID,
TORCHELASTIC_RESTART_COUNT), SURREAL_GROUP_RESTARTS and the store SURREAL_RANKS_STORE names: a
folder of FileStores on one machine or pod. Across learner pods (global rank = pod x N/P + local
rank), pod 0's agent serves a TCPStore at SURREAL_RANKS_CONTROL; the agents agree on a generation
there before each group (`PodControl.next_generation`), and the ranks' store is that generation's
prefix of it, so a restarted group starts from an empty one on every pod. A group that ends because
a peer pod left is not this pod's failure (policy.LEARNER_GROUP).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from surreal.runtime.exits import EXIT_GROUP_NOT_FORMED
from surreal.runtime.run import (
    ENV_CONTROL,
    ENV_POD,
    ENV_PODS,
    ENV_RANK,
    ENV_WORLD_SIZE,
    CollectiveFailed,
    PeerLost,
    RoleFailed,
    rank_from_environ,
)

log = logging.getLogger(__name__)

ENV_RUN_ID = "TORCHELASTIC_RUN_ID"
ENV_RESTART_COUNT = "TORCHELASTIC_RESTART_COUNT"
ENV_STORE = "SURREAL_RANKS_STORE"  # "file:FOLDER"
ENV_GROUP_RESTARTS = "SURREAL_GROUP_RESTARTS"  # restarts of the group before this one (launch_ranks)
ENV_MARKS = "SURREAL_RANKS_MARKS"  # the folder of the ranks' came-up and formed marks (the agent's)
ENV_GENERATION = "SURREAL_RANKS_GENERATION"  # the group's generation, agreed by the pods' agents

COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=120)  # any one collective (a lost peer's raises)
# Forming the group: the ranks are started together, and one starts in seconds (torch imported, the
# spec read); one that has not joined by then is not coming (hung, or stuck before it could fail).
# The agent (launch_ranks) counts it from the group's start, a rank waiting for its peers from its
# own join: the agent's comes first, and names the ranks that never came.
JOIN_TIMEOUT = datetime.timedelta(seconds=60)
# Then forming the process group (gloo's connections between ranks that all joined: well under a
# second on the loopback). A rank still inside init_process_group this long after JOIN_TIMEOUT is
# hung there (the agent's JoinWatch fails the group; gloo's own timeout, COLLECTIVE_TIMEOUT from
# the rank's call, would come later and count as an ordinary failure).
FORM_TIMEOUT = JOIN_TIMEOUT / 2
PEER_TIMEOUT_SECONDS = 60.0  # a peer silent this long (hung, or gone without a word) is lost
HEARTBEAT_SECONDS = 1.0


class GroupNotFormed(RoleFailed):
    """Some ranks did not join the group in time; the message names them. Fatal for the learner:
    a rank that hung before joining would hang again."""

    def __init__(self, message: str) -> None:
        super().__init__(EXIT_GROUP_NOT_FORMED, message)


class RankGroup:
    """One rank's view of its group. `RankGroup()` is the group of one: every collective is the
    identity and nothing is opened, so a single learner runs exactly as it always did."""

    def __init__(self, rank: int = 0, size: int = 1, store: dist.Store | None = None) -> None:
        if not 0 <= rank < size:
            raise ValueError(f"rank {rank} is not in a group of {size}")
        if size > 1 and store is None:
            raise ValueError("a group of several ranks needs a store")
        self.rank, self.size, self.store = rank, size, store
        self.restarts = 0  # times the elastic agent restarted the group before this one
        self.collective_seconds = 0.0  # spent in collectives (waiting for the slowest rank included)
        self._beat_at = float("-inf")
        # peer -> (its last heartbeat count seen, when it changed: local monotonic clock)
        self._peers: dict[int, tuple[int, float]] = {}
        self._checked_at = float("-inf")

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    # --- collectives (every rank calls the same ones in the same order) ---

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor` summed over the ranks: the same bytes on every rank (through the CPU, for gloo;
        in place if it is there). The group of one returns `tensor` itself."""
        if self.size == 1:
            return tensor
        host = tensor.cpu()
        with self._collective("an all-reduce"):
            dist.all_reduce(host, op=dist.ReduceOp.SUM)
        return host.to(tensor.device)

    def sum_grads(self, params: Sequence[torch.Tensor]) -> None:
        """Each gradient of `params` summed over the ranks (a gradient that is None: zeros), in one
        all-reduce. The group of one returns at once."""
        if self.size == 1:
            return
        set_flat_grads(params, self.sum(flat_grads(params)))

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, by rank."""
        if self.size == 1:
            return [obj]
        out: list[Any] = [None] * self.size
        with self._collective("an all-gather"):
            dist.all_gather_object(out, obj)
        return out

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank."""
        if self.size == 1:
            return obj
        box = [obj if self.is_root else None]
        with self._collective("a broadcast", timed=False):
            dist.broadcast_object_list(box, src=0)
        return box[0]

    @contextlib.contextmanager
    def _collective(self, what: str, timed: bool = True) -> Any:
        """Run one collective: its time counted in `collective_seconds` (`timed`), and what gloo
        raises when a peer is gone or hung (a RuntimeError naming its source line) said as
        CollectiveFailed, which names this rank and what it means."""
        started = time.perf_counter()
        try:
            yield
        except RuntimeError as exc:
            detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise CollectiveFailed(
                f"learner rank {self.rank} lost its group in {what}: a peer rank or pod is gone or hung "
                f"(its agent starts the group again from rank 0's checkpoint): {detail[:300]}"
            ) from exc
        finally:
            if timed:
                self.collective_seconds += time.perf_counter() - started

    # --- agreeing when to run collectives (through the store; never blocks) ---

    def add_steps(self, round_: int, steps: int) -> int:
        """This rank took `steps` more env steps for update `round_`; the group's count with them
        (the order of the adds orders the fragments, so the ranks agree which one filled the batch)."""
        if self.size == 1:
            raise RuntimeError("a group of one counts its own steps")
        assert self.store is not None
        return int(self.store.add(f"steps/{round_}", steps))

    def group_steps(self, round_: int) -> int:
        """Env steps the whole group has taken for update `round_` so far."""
        return self.add_steps(round_, 0)

    def commit(self, round_: int) -> None:
        """This rank will run update `round_`'s collectives as soon as every rank has committed."""
        if self.size > 1:
            assert self.store is not None
            self.store.set(f"commit/{round_}/{self.rank}", "1")

    def all_committed(self, round_: int) -> bool:
        """Whether every rank has committed to `round_`."""
        if self.size == 1:
            return True
        assert self.store is not None
        return bool(self.store.check([f"commit/{round_}/{r}" for r in range(self.size)]))

    def keep_alive(self) -> None:
        """Beat this rank's heart and look at the peers' (each at most once a second); raises
        PeerLost if a peer left or has been silent for PEER_TIMEOUT_SECONDS. A rank calls it
        whenever it looks whether an update is due."""
        if self.size == 1:
            return
        self.heartbeat()
        self._check_peers()

    def heartbeat(self) -> None:
        if self.size == 1 or time.monotonic() - self._beat_at < HEARTBEAT_SECONDS:
            return
        assert self.store is not None
        self._beat_at = time.monotonic()
        self.store.add(f"alive/{self.rank}", 1)

    def _check_peers(self) -> None:
        now = time.monotonic()
        if now - self._checked_at < HEARTBEAT_SECONDS:
            return
        self._checked_at = now
        assert self.store is not None
        for peer in range(self.size):
            if peer == self.rank:
                continue
            if self.store.check([f"left/{peer}"]):
                code = self.store.get(f"left/{peer}").decode()
                raise PeerLost(f"learner rank {peer} left (exit {code})")
            beats = int(self.store.add(f"alive/{peer}", 0))  # 0 until its first beat
            seen, since = self._peers.get(peer, (-1, now))
            if beats != seen:
                self._peers[peer] = (beats, now)
            elif now - since >= PEER_TIMEOUT_SECONDS:
                raise PeerLost(f"learner rank {peer} has been silent for {now - since:.0f} s")

    def leave(self, code: int) -> None:
        """Tell the peers this rank is exiting with `code` (best effort: the store may be gone)."""
        if self.size == 1 or self.store is None:
            return
        try:
            self.store.set(f"left/{self.rank}", str(code))
        except Exception:  # noqa: BLE001 - the peers will see the silence instead
            pass

    def close(self) -> None:
        if self.size > 1 and dist.is_initialized():
            dist.destroy_process_group()


def open_store(spec: str, size: int, generation: str) -> dist.Store:
    """The store that SURREAL_RANKS_STORE names, for one generation of the group (a restarted
    group starts from an empty one): a FileStore where the ranks share one machine (or pod), the
    generation's prefix of pod 0's control store (`tcp:HOST:PORT`) where they span pods."""
    kind, _, where = spec.partition(":")
    if kind == "file" and where:
        folder = Path(where)
        folder.mkdir(parents=True, exist_ok=True)
        return dist.FileStore(str(folder / f"store-{generation}"), size)
    if kind == "tcp" and where:
        host, port = split_addr(where)
        client = dist.TCPStore(host, port, is_master=False, timeout=COLLECTIVE_TIMEOUT)
        return dist.PrefixStore(f"gen{generation}", client)  # its keys: genG/KEY (PodControl.lost)
    raise ValueError(f"{ENV_STORE}={spec!r}: expected file:FOLDER or tcp:HOST:PORT")


def split_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not (sep and host and port.isdigit()):
        raise ValueError(f"expected HOST:PORT, got {addr!r}")
    return host, int(port)


class Pods:
    """Where this learner pod stands among the experiment's learner pods (from the environment)."""

    def __init__(self, pod: int = 0, pods: int = 1, control: str = "") -> None:
        if not 0 <= pod < pods:
            raise ValueError(f"learner pod {pod} is not one of {pods}")
        if pods > 1:
            split_addr(control)
        self.pod, self.pods, self.control = pod, pods, control

    @classmethod
    def from_environ(cls) -> Pods:
        """SURREAL_LEARNER_PODS and SURREAL_RANKS_CONTROL; this pod is SURREAL_LEARNER_POD (the
        first pod of its Job: 0 for the learner's, 1 for its peers') plus the Job's completion
        index (JOB_COMPLETION_INDEX, which Kubernetes and the containers backend set)."""
        pods = int(os.environ.get(ENV_PODS, "1") or 1)
        if pods == 1:
            return cls()
        pod = int(os.environ.get(ENV_POD, "0") or 0) + int(os.environ.get("JOB_COMPLETION_INDEX", "0") or 0)
        return cls(pod, pods, os.environ.get(ENV_CONTROL, ""))


def join_group(
    rank: int,
    size: int,
    store: dist.Store,
    *,
    join_timeout: datetime.timedelta = JOIN_TIMEOUT,
    timeout: datetime.timedelta = COLLECTIVE_TIMEOUT,
) -> RankGroup:
    """Form the gloo process group of `size` ranks on `store`. A rank that never comes up fails
    the group in bounded time: GroupNotFormed after `join_timeout`, naming the ranks that did not
    join. Every collective of the group then raises after `timeout` rather than wait for a peer
    that is gone."""
    if size == 1:
        return RankGroup()
    store.set(f"joined/{rank}", "1")
    deadline = time.monotonic() + join_timeout.total_seconds()
    while not store.check([f"joined/{r}" for r in range(size)]):
        if time.monotonic() >= deadline:
            missing = [r for r in range(size) if not store.check([f"joined/{r}"])]
            raise GroupNotFormed(not_joined(missing, size, join_timeout))
        time.sleep(0.05)
    try:
        dist.init_process_group("gloo", store=store, rank=rank, world_size=size, timeout=timeout)
    except Exception as exc:  # every rank joined, and the group still did not form: fatal too
        raise GroupNotFormed(f"learner rank {rank} of {size} could not form the process group: "
                             f"{' '.join(str(exc).split())[:300]}") from exc  # fmt: skip
    return RankGroup(rank, size, store)


def not_joined(missing: Sequence[int], size: int, timeout: datetime.timedelta) -> str:
    return (f"learner rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} of {size} "
            f"did not join the group within {timeout.total_seconds():.0f} s")  # fmt: skip


def came_up(folder: Path, generation: str, rank: int) -> Path:
    """The file a rank creates as it joins (the agent's JoinWatch looks for it)."""
    return folder / f"up-{generation}-{rank}"


def formed(folder: Path, generation: str, rank: int) -> Path:
    """The file a rank creates once its process group formed (the agent's JoinWatch looks)."""
    return folder / f"formed-{generation}-{rank}"


def group_from_environ(learners: int, join_timeout: datetime.timedelta = JOIN_TIMEOUT) -> RankGroup:
    """This process's group: the group of one when `learners` is 1, else the rank the elastic
    agent started this process as (its peers have `join_timeout` to join)."""
    if learners == 1:
        return RankGroup()
    found = rank_from_environ()
    if found is None or found[1] != learners:
        raise ValueError(f"a learner of {learners} ranks needs {ENV_RANK} and {ENV_WORLD_SIZE}"
                         f"={learners} (set by the rank launcher); got {found}")  # fmt: skip
    rank, size = found
    _die_with_parent()
    spec = os.environ.get(ENV_STORE)
    if not spec:
        raise ValueError(f"{ENV_STORE} is not set (the rank launcher sets it)")
    generation = f"{os.environ.get(ENV_RUN_ID, 'run')}-{os.environ.get(ENV_RESTART_COUNT, '0')}"
    store = open_store(spec, size, os.environ.get(ENV_GENERATION) or generation)
    started = time.monotonic()
    folder = Path(os.environ.get(ENV_MARKS) or spec.partition(":")[2])
    came_up(folder, generation, rank).touch()
    group = join_group(rank, size, store, join_timeout=join_timeout)
    formed(folder, generation, rank).touch()
    group.restarts = int(os.environ.get(ENV_GROUP_RESTARTS, "0") or 0)
    log.info("learner rank %d of %d joined the group (generation %s) in %.1f s", rank, size,
             generation, time.monotonic() - started)  # fmt: skip
    return group


def _die_with_parent() -> None:
    """A rank dies with the agent that started it (Linux): the agent puts its ranks in sessions of
    their own, out of reach of whoever stops the agent's process group."""
    import ctypes
    import signal
    import sys

    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the agent died before the call
        os._exit(1)


def flat_grads(params: Sequence[torch.Tensor]) -> torch.Tensor:
    """Every parameter's gradient (zeros where there is none) in one flat buffer."""
    return torch.cat([
        (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params
    ])  # fmt: skip


def set_flat_grads(params: Sequence[torch.Tensor], flat: torch.Tensor) -> None:
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset : offset + n].view_as(p).clone()
        offset += n

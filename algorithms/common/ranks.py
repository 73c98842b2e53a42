"""Learner ranks: N processes that train one policy together (data parallel), each fed by its own
share of the actors.

Every rank runs the whole learner loop: its own server, its own actors (worker index % N), its own
batch. An update is collective: the ranks combine their counters and normalization statistics, then
average gradients minibatch by minibatch (`sum_grads`; torch.distributed, gloo on CPU), so that
after every update each rank holds the same weights, optimizer state and version. The group of one
(`RankGroup()`, a single learner) runs the same update: its collectives are the identity.

An update is due when the group as a whole holds a batch (`add_steps` counts each rank's intake in
the store), whichever ranks' actors sent it: as with one learner, a faster actor fills more of it
and nothing waits for the slowest, so the data is as fresh as one learner's; a rank whose actors
sent nothing takes part with no rows. Collectives start only when every rank has committed to the
same update (`commit`, then `all_committed` until true): a commitment is a key in the group's
store, polled without blocking, so a rank waiting for its peers keeps serving, reporting status
and hearing SIGTERM. Once all have committed the collectives of the update run at once, each
bounded by COLLECTIVE_TIMEOUT. A peer that stops heart-beating for PEER_TIMEOUT_SECONDS, or that
leaves, ends the wait with `PeerLost`: the group is restarted (`launch_ranks`, in the learner's
process or pod) and resumes from rank 0's checkpoint, which rank 0 broadcasts to the others at
start. A group that does not form fails the learner at once (`GroupNotFormed`, exit
EXIT_GROUP_NOT_FORMED: a fatal exit of the learner role, restarted neither by `launch_ranks` nor
by the backend), with a reason that names the ranks: one has not joined JOIN_TIMEOUT after the
group was started, or they all joined and some are still inside init_process_group FORM_TIMEOUT
later (hung there), or init_process_group failed.

The process group is formed from what torch's elastic agent gives every worker (RANK, WORLD_SIZE,
TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT), the group's restarts (SURREAL_GROUP_RESTARTS)
and a store named by SURREAL_RANKS_STORE: a folder for FileStores (one machine or pod; no port is
opened but gloo's, on the loopback).

Ranks across learner pods (SURREAL_LEARNER_POD of SURREAL_LEARNER_PODS, each pod's agent running
its N/P ranks, global rank = pod x N/P + local rank): pod 0's agent serves a TCPStore at
SURREAL_RANKS_CONTROL ("HOST:PORT"; inside a pod it listens on the pod's interfaces, as torch's
store does), every agent and rank is its client. The agents agree on a generation there before
each group (`PodControl.next_generation`: all pods arrive, or GroupNotFormed names those that did
not within POD_JOIN_TIMEOUT), and the ranks' store is that generation's prefix of it, so a
restarted group starts from an empty one on every pod. A pod that is lost (killed, preempted,
rescheduled) ends the group on the others (its ranks' `left` keys, or their silence); each agent
then starts its ranks again in the next generation, which waits for the lost pod's replacement,
and rank 0 resumes from its checkpoint. A group that ends because a peer pod left is not this
pod's failure: it does not count against MAX_GROUP_RESTARTS.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from surreal.algorithms.common.run import (
    ENV_CONTROL,
    ENV_GROUP_SIZE,
    ENV_POD,
    ENV_PODS,
    ENV_RANK,
    ENV_RANK_OFFSET,
    ENV_WORLD_SIZE,
    EXIT_COLLECTIVE_FAILED,
    EXIT_GROUP_NOT_FORMED,
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
# Ranks across learner pods (set by the backend on each learner pod's container).
CONTROL_PORT = 29400  # the control store's port in pod 0 (torch's customary rendezvous port)
# How long the pods' agents wait for each other before a group: a lost pod's replacement may have
# to be scheduled (a new node, an image pull); one that has not come by then is not coming soon.
POD_JOIN_TIMEOUT = datetime.timedelta(minutes=10)
# At the end, pod 0's agent keeps the control store this long for the other pods to see the end.
FINISH_LINGER_SECONDS = 30.0
# After a group of several pods ended in a failure of this pod's ranks: how long the agent looks
# whether another pod's rank left it first (its agent marks it within a few monitor intervals).
PEER_LEFT_WAIT_SECONDS = 3.0

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


class PeerLost(RuntimeError):
    """Another rank left or went silent: this group cannot update any more."""


class CollectiveFailed(RuntimeError):
    """A collective of this rank's group raised (gloo: a peer's connection closed, or the
    collective's timeout passed): a peer rank or pod is gone or hung. Unlike PeerLost, this rank
    may be part-way through an update, so it saves nothing and fails; its agent starts the group
    again from rank 0's last checkpoint."""


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
        self._beats = 0
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
        if self.size == 1:
            raise RuntimeError("a group of one counts its own steps")
        assert self.store is not None
        return int(self.store.add(f"steps/{round_}", 0))

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
        self._beats = int(self.store.add(f"alive/{self.rank}", 1))

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


class PodControl:
    """The learner pods' agents' agreement, in pod 0's control store (`store`): which generation
    the next group is. A store is one pod 0's life (`store_id`): a restarted pod 0 starts a new
    one, which the other agents take as a fresh start."""

    def __init__(self, store: dist.Store, pods: Pods, ranks: Sequence[int] = ()) -> None:
        self.store, self.pods, self.ranks = store, pods, ranks  # `ranks`: this pod's
        self.last: int | None = None  # the generation this agent last took part in
        self.store_id = store.get("store_id").decode()

    def next_generation(self, timeout: datetime.timedelta = POD_JOIN_TIMEOUT, poll: float = 0.05) -> int:
        """The generation of this pod's next group, once every pod has arrived at it. A fresh
        agent (its pod just started) joins the current generation, unless its pod already arrived
        there (its predecessor: that group lost it, so the next one is due); an agent whose group
        ended takes the next. Raises GroupNotFormed naming the pods that did not come."""
        while True:
            current = int(self.store.add("gen", 0))
            if self.last is None:
                mine = self.store.check([arrived(current, self.pods.pod)])
                generation = current + 1 if mine else current
                if mine:  # this pod's predecessor was in `current`: its ranks are gone, say so
                    self.lost(current, self.ranks)
            else:
                generation = max(self.last + 1, current)
            if generation > current:
                self.store.compare_set("gen", str(current), str(generation))
            self.last = generation
            self.store.set(arrived(generation, self.pods.pod), "1")
            deadline = time.monotonic() + timeout.total_seconds()
            while True:
                missing = [p for p in range(self.pods.pods) if not self.store.check([arrived(generation, p)])]
                if not missing:
                    return generation
                if int(self.store.add("gen", 0)) > generation:
                    break  # another pod moved on (its predecessor had arrived here): follow it
                if time.monotonic() >= deadline:
                    raise GroupNotFormed(
                        f"learner pod{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} of "
                        f"{self.pods.pods} did not come within {timeout.total_seconds():.0f} s"
                    )
                time.sleep(poll)

    def lost(self, generation: int, ranks: Sequence[int]) -> None:
        """Tell the peers of `generation` that this pod's `ranks` are gone (killed ranks cannot)."""
        for rank in ranks:
            with contextlib.suppress(Exception):
                self.store.set(f"gen{generation}/left/{rank}", "lost")

    def peer_left(self, generation: int, ranks: Sequence[int], seconds: float, poll: float = 0.1) -> bool:
        """Whether any of `ranks` (other pods') left `generation`, or is said lost by its agent
        within `seconds` (a rank killed in a collective fails its peers before its agent says so)."""
        keys = [f"gen{generation}/left/{rank}" for rank in ranks]
        deadline = time.monotonic() + seconds
        while True:
            try:
                if any(self.store.check([key]) for key in keys):
                    return True
            except Exception:  # noqa: BLE001 - pod 0's store is gone: that pod left
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll)

    def finish(self) -> None:
        self.store.set("finished", "1")
        self.store.set(f"finished/{self.pods.pod}", "1")

    def finished(self) -> bool:
        return bool(self.store.check(["finished"]))

    def wait_finished(self, seconds: float, poll: float = 0.2) -> None:
        """Pod 0, at the end: keep the store until every pod has seen the end (or `seconds`)."""
        deadline = time.monotonic() + seconds
        keys = [f"finished/{p}" for p in range(self.pods.pods)]
        while not self.store.check(keys) and time.monotonic() < deadline:
            time.sleep(poll)


def arrived(generation: int, pod: int) -> str:
    return f"arrived/{generation}/{pod}"


def control_store(
    pods: Pods, server: dist.Store | None = None, timeout: datetime.timedelta = POD_JOIN_TIMEOUT
) -> tuple[dist.Store, dist.Store | None]:
    """(a client of the control store, its server where this is pod 0's agent: made once, kept for
    the agent's life). A client waits up to `timeout` for pod 0."""
    import uuid

    host, port = split_addr(pods.control)
    if pods.pod == 0 and server is None:
        server = dist.TCPStore(host, port, is_master=True, wait_for_workers=False, timeout=COLLECTIVE_TIMEOUT)
        server.set("store_id", uuid.uuid4().hex)
    deadline = time.monotonic() + timeout.total_seconds()
    while True:  # pod 0 may not be there yet: its name may not even resolve
        left = datetime.timedelta(seconds=max(1.0, deadline - time.monotonic()))
        try:
            client = dist.TCPStore(host, port, is_master=False, timeout=min(left, COLLECTIVE_TIMEOUT))
            client.wait(["store_id"], left)
            return client, server
        except Exception as exc:  # noqa: BLE001 - torch's store errors are RuntimeErrors
            if time.monotonic() >= deadline:
                why = " ".join(str(exc).split())[:200]
                raise GroupNotFormed(f"learner pod {pods.pod} of {pods.pods} could not reach pod 0's control "
                                     f"store at {pods.control} within {timeout.total_seconds():.0f} s: {why}"
                                     ) from None  # fmt: skip
            time.sleep(1.0)


def agree(
    pods: Pods,
    control: PodControl | None,
    server: dist.Store | None,
    timeout: datetime.timedelta = POD_JOIN_TIMEOUT,
    ranks: Sequence[int] = (),
) -> tuple[int, PodControl, dist.Store | None]:
    """The next generation, agreed with the other pods' agents: (it, the control, its server). A
    control store that went away (pod 0 restarted: a new, empty one) is connected to again, and
    this agent starts there as a fresh one."""
    for attempt in range(2):
        try:
            if control is None:
                client, server = control_store(pods, server, timeout)
                control = PodControl(client, pods, ranks)
            return control.next_generation(timeout), control, server
        except GroupNotFormed:
            raise
        except Exception as exc:  # noqa: BLE001 - the store's errors are RuntimeErrors of torch's
            if attempt:
                raise
            log.warning("learner pods' control store: %s; connecting again", " ".join(str(exc).split())[:200])
            control = None
    raise AssertionError("unreachable")


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


def not_formed(unformed: Sequence[int], size: int, timeout: datetime.timedelta) -> str:
    return (f"learner rank{'s' if len(unformed) > 1 else ''} {', '.join(map(str, unformed))} of {size} "
            f"joined but did not form the process group within {timeout.total_seconds():.0f} s of "
            "its start (hung in init_process_group)")  # fmt: skip


def _came_up(folder: Path, generation: str, rank: int) -> Path:
    """The file a rank creates as it joins (the agent's JoinWatch looks for it)."""
    return folder / f"up-{generation}-{rank}"


def _formed(folder: Path, generation: str, rank: int) -> Path:
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
    _came_up(folder, generation, rank).touch()
    group = join_group(rank, size, store, join_timeout=join_timeout)
    _formed(folder, generation, rank).touch()
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


# --- starting the ranks on one machine: torch's elastic agent ---

MAX_GROUP_RESTARTS = 3  # group restarts by launch_ranks before the learner itself fails
MONITOR_SECONDS = 0.5  # how often the agent looks at its ranks


def loopback_interface() -> str | None:
    """The name of the interface that holds 127.0.0.1 (gloo listens there, never elsewhere)."""
    import psutil

    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address == "127.0.0.1" for a in addrs):
            return name
    return None


def _started_here() -> list[Any]:
    """The processes this one started (the agent's: its ranks, and nothing else)."""
    import psutil

    return psutil.Process().children()


class _Watcher:
    """A daemon thread running `_watch` until `stop()`, which waits for it: `_stopped` tells it."""

    name = "surreal-watch"

    def __init__(self) -> None:
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=self.name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()

    def _watch(self) -> None:
        raise NotImplementedError


class JoinWatch(_Watcher):
    """The agent's bound on forming a group: `timeout` after the group's start, the ranks that
    have not come up (`_came_up`) are named in `missing`; `form_timeout` later, the ranks that
    came up but whose process group has not formed (`_formed`: hung in init_process_group). Either
    way `problem` says so and the ranks (`started()`: psutil processes) are killed, which ends the
    agent's run. A thread; `stop()` once the run is over."""

    name = "surreal-join-watch"

    def __init__(
        self,
        folder: Path,
        generation: str,
        size: int,
        timeout: datetime.timedelta,
        started: Callable[[], list[Any]] = _started_here,
        form_timeout: datetime.timedelta = FORM_TIMEOUT,
        first: int = 0,
        total: int | None = None,
    ) -> None:
        self.folder, self.generation, self.size, self.timeout = folder, generation, size, timeout
        self.form_timeout = form_timeout
        # The ranks watched: `size` of them from `first` (a learner pod's), of `total` in the group.
        self.ranks, self.total = range(first, first + size), total or size
        self.started = started
        self.missing: list[int] = []
        self.problem: str | None = None  # why the group did not form, once the watch gave up on it
        super().__init__()

    def _watch(self) -> None:
        if self._stopped.wait(self.timeout.total_seconds()):
            return
        missing = [r for r in self.ranks if not _came_up(self.folder, self.generation, r).exists()]
        if missing:
            self.missing = missing
            self._give_up(not_joined(missing, self.total, self.timeout))
            return
        if self._stopped.wait(self.form_timeout.total_seconds()):
            return
        unformed = [r for r in self.ranks if not _formed(self.folder, self.generation, r).exists()]
        if unformed:
            self._give_up(not_formed(unformed, self.total, self.timeout + self.form_timeout))

    def _give_up(self, problem: str) -> None:
        self.problem = problem
        log.error("%s: stopping the group", problem)
        for process in self.started():
            with contextlib.suppress(Exception):  # psutil.Error: it is gone already
                process.kill()


class StopForward(_Watcher):
    """The agent's stop request (preemption.stop_for: the learner's role failed elsewhere, e.g.
    no actor is left) passed on to its ranks as SIGTERM, once to each rank that is up: they save
    and leave as on a real SIGTERM (rank 0 checkpoints), and `launch_ranks` restarts no group. A
    thread; `stop()` once the run is over."""

    name = "surreal-stop-forward"

    def __init__(self, started: Callable[[], list[Any]] = _started_here) -> None:
        self.started = started
        self._told: set[int] = set()
        super().__init__()

    def _watch(self) -> None:
        from surreal.algorithms.common import preemption

        while not self._stopped.is_set():
            if not preemption.wait_requested(MONITOR_SECONDS):
                continue
            for process in self.started():  # ranks that came up late are told too
                if process.pid not in self._told:
                    self._told.add(process.pid)
                    with contextlib.suppress(Exception):  # psutil.Error: it is gone already
                        process.terminate()
            self._stopped.wait(MONITOR_SECONDS)


def launch_ranks(
    learners: int,
    join_timeout: datetime.timedelta = JOIN_TIMEOUT,
    *,
    pods: Pods | None = None,
    argv: Sequence[str] | None = None,
    pod_join_timeout: datetime.timedelta = POD_JOIN_TIMEOUT,
) -> int:
    """Run this very component (sys.argv; `argv`: other arguments of the interpreter) as
    `learners` ranks under torch's elastic agent, on this machine: a rank that fails (or is
    killed) makes the agent stop the others, and the whole group is started again
    (MAX_GROUP_RESTARTS times) from rank 0's last checkpoint. A group whose ranks have not all
    joined `join_timeout` after its start is not restarted: GroupNotFormed names them (the learner
    exits EXIT_GROUP_NOT_FORMED). The rendezvous and the ranks' store are files in a private
    temporary folder (a pod's /tmp: never the checkpoint volume, which may be a network
    filesystem); gloo listens on the loopback. Returns 0 when every rank finished, EXIT_PREEMPTED
    after SIGTERM or a stop request (preemption.stop_for; each rank got SIGTERM, rank 0 saved), 1
    when the group failed for good (the log names the rank and why).

    Across learner pods (`pods`, default from the environment: Pods.from_environ) this agent runs
    its pod's learners / pods ranks, in the generation the pods agree on in pod 0's control store
    (the ranks' store is that generation's part of it; gloo on the interface that reaches pod 0)."""
    import shutil
    import tempfile

    from surreal.algorithms.common import preemption
    from surreal.algorithms.common.preemption import EXIT_PREEMPTED

    pods = pods or Pods.from_environ()
    if learners % pods.pods:
        raise ValueError(f"{learners} learner ranks cannot be spread evenly over {pods.pods} learner pods")
    local = learners // pods.pods
    first = pods.pod * local
    folder = Path(tempfile.mkdtemp(prefix="surreal-ranks-"))
    # The agent then opens no TCP store of its own: the ranks use files, or pod 0's control store.
    os.environ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    os.environ[ENV_STORE] = f"file:{folder}"
    os.environ[ENV_MARKS] = str(folder)
    iface = loopback_interface() if pods.pods == 1 else interface_towards(split_addr(pods.control)[0])
    if iface is not None:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", iface)
    control: PodControl | None = None
    server: dist.Store | None = None  # pod 0's control store, served while this agent lives
    counted = 0
    try:
        for starts in range(4 * MAX_GROUP_RESTARTS + 1):  # a peer pod's losses are not counted, but bounded
            if preemption.requested():  # asked to stop between groups (stop_for): none to save
                return EXIT_PREEMPTED
            generation = None
            if pods.pods > 1:
                generation, control, server = agree(pods, control, server, pod_join_timeout,
                                                    range(first, first + local))  # fmt: skip
                os.environ.update({ENV_STORE: f"tcp:{pods.control}", ENV_GENERATION: str(generation),
                                   ENV_RANK_OFFSET: str(first), ENV_GROUP_SIZE: str(learners)})  # fmt: skip
            # The group's restarts so far (status: group_restarts), those a peer pod's loss caused too.
            code, peer_lost = _run_group(local, folder, starts, join_timeout, first=first, total=learners,
                                         argv=argv)  # fmt: skip
            if code is not None:
                if control is not None and code == 0:
                    _finish(control, server is not None)
                return code
            if control is not None and generation is not None:
                # A rank of this pod that failed in a collective because another pod's rank went
                # away: the peer's loss too (its agent says so within a few monitor intervals).
                others = [r for r in range(learners) if not first <= r < first + local]
                peer_lost = peer_lost or control.peer_left(generation, others, PEER_LEFT_WAIT_SECONDS)
                control.lost(generation, range(first, first + local))
                if _finished(control):  # the run is over: a peer's end only looked like a loss
                    _finish(control, server is not None)
                    return 0
            counted += not peer_lost
            if counted > MAX_GROUP_RESTARTS:
                break
            why = "a peer pod left" if peer_lost else "a rank failed"
            log.info("learner ranks: starting the group again (%s; %d counted restarts of %d)", why, counted,
                     MAX_GROUP_RESTARTS)  # fmt: skip
        log.error("learner ranks failed after %d group restarts", MAX_GROUP_RESTARTS)
        return 1
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _finish(control: PodControl, serving: bool) -> None:
    """Say the end; pod 0 (`serving` the store) keeps it until every pod has seen it."""
    with contextlib.suppress(Exception):
        control.finish()
        if serving:
            control.wait_finished(FINISH_LINGER_SECONDS)


def _finished(control: PodControl) -> bool:
    try:
        return control.finished()
    except Exception:  # noqa: BLE001 - pod 0's store is gone: next_generation will tell
        return False


def interface_towards(host: str) -> str | None:
    """The name of the interface this machine reaches `host` through (gloo's, across pods)."""
    import socket

    import psutil

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((socket.gethostbyname(host), 9))  # no packet is sent
            local = probe.getsockname()[0]
    except OSError:
        return None
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address == local for a in addrs):
            return name
    return None


def _run_group(
    learners: int,
    folder: Path,
    restarts: int,
    join_timeout: datetime.timedelta,
    *,
    first: int = 0,
    total: int | None = None,
    argv: Sequence[str] | None = None,
) -> tuple[int | None, bool]:
    """One group of `learners` ranks on this machine (the group's `restarts`-th restart; ranks
    `first`... of `total` across learner pods): (its exit code, or None if a rank failed and the
    group may be started again; whether it ended because a peer (another pod's rank) left)."""
    import sys
    import uuid

    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    from surreal.algorithms.common import preemption
    from surreal.algorithms.common.preemption import EXIT_PREEMPTED

    # A fresh run id each time: a new rendezvous and generation (each rank's store starts empty),
    # and the agent never restarts a group itself (launch_ranks does, unless it never formed).
    run_id = uuid.uuid4().hex[:12]
    os.environ[ENV_GROUP_RESTARTS] = str(restarts)
    config = LaunchConfig(
        min_nodes=1, max_nodes=1, nproc_per_node=learners, run_id=run_id, role="learner",
        rdzv_backend="c10d", rdzv_endpoint=str(folder / f"rendezvous-{run_id}"),
        rdzv_configs={"store_type": "file"}, max_restarts=0, monitor_interval=MONITOR_SECONDS,
        start_method="spawn",
    )  # fmt: skip
    log.info(
        "starting %d learner ranks (elastic agent, run %s, group restart %d)", learners, run_id, restarts
    )
    watch = JoinWatch(folder, f"{run_id}-0", learners, join_timeout, form_timeout=join_timeout / 2,
                      first=first, total=total)  # fmt: skip
    watch.start()
    forward = StopForward()
    forward.start()
    try:
        elastic_launch(config, sys.executable)(
            *(argv if argv is not None else ("-m", "surreal", *sys.argv[1:]))
        )
    except SignalException as exc:
        log.info("learner ranks stopped by signal %s", exc.sigval)
        return EXIT_PREEMPTED, False
    except ChildFailedError as exc:
        if preemption.requested():  # told to stop (StopForward): the ranks saved and left
            log.info("learner ranks stopped: %s", preemption.failure() or "stop requested")
            return EXIT_PREEMPTED, False
        if watch.problem:
            raise GroupNotFormed(watch.problem) from None
        unformed = sorted(r for r, f in exc.failures.items() if f.exitcode == EXIT_GROUP_NOT_FORMED)
        if unformed:  # a rank's own wait ended first, or its init_process_group failed (its log says)
            raise GroupNotFormed(f"the {learners} learner ranks did not form their group (rank"
                                 f"{'s' if len(unformed) > 1 else ''} {', '.join(map(str, unformed))} "
                                 f"exited {EXIT_GROUP_NOT_FORMED}; the log says why)") from None  # fmt: skip
        # A rank that saved and left on its own (PeerLost: a peer left) exits as on SIGTERM, one
        # whose collective raised (a peer gone mid-update) EXIT_COLLECTIVE_FAILED; the agent then
        # stopped the others. Across pods, when every rank of this pod that failed failed so, the
        # peer was another pod's: not a failure here. A rank of this pod that died on its own is.
        peer_lost = (
            total is not None
            and total > learners
            and all(f.exitcode in (EXIT_PREEMPTED, EXIT_COLLECTIVE_FAILED) for f in exc.failures.values())
        )
        if peer_lost:
            log.warning("learner ranks: a peer pod's rank left; the group is started again")
        else:
            log.error("learner ranks failed (group restart %d; %d may count):\n%s", restarts,
                      MAX_GROUP_RESTARTS, exc.format_msg())  # fmt: skip
        return None, peer_lost
    finally:
        forward.stop()
        watch.stop()
    log.info("every learner rank finished")
    return 0, False

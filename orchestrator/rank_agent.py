"""Supervising learner ranks (`--learners N`): the agent that starts a learner's ranks under torch's
elastic agent, watches them form their group, passes a stop on, and starts the group again from
rank 0's checkpoint when a rank fails, within the budget of the learner group's role policy
(policy.LEARNER_GROUP, decided by the one `decide`). Across learner pods, the pods' agents agree
in pod 0's control store which generation each group is (`PodControl`).

What a rank runs (its group, collectives, joining and forming) is the runtime's:
runtime/ranks.py. `surreal component learner` comes here instead of the learner's own
program when it is to run several ranks and is not one of them.
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

import torch.distributed as dist

from surreal.orchestrator.policy import LEARNER_GROUP, Action, decide
from surreal.runtime.exits import EXIT_COLLECTIVE_FAILED, EXIT_GROUP_NOT_FORMED
from surreal.runtime.ranks import (
    COLLECTIVE_TIMEOUT,
    ENV_GENERATION,
    ENV_GROUP_RESTARTS,
    ENV_MARKS,
    ENV_STORE,
    FORM_TIMEOUT,
    JOIN_TIMEOUT,
    GroupNotFormed,
    Pods,
    came_up,
    formed,
    not_joined,
    split_addr,
)
from surreal.runtime.run import ENV_GROUP_SIZE, ENV_RANK_OFFSET

log = logging.getLogger(__name__)

# How long the pods' agents wait for each other before a group: a lost pod's replacement may have
# to be scheduled (a new node, an image pull); one that has not come by then is not coming soon.
POD_JOIN_TIMEOUT = datetime.timedelta(minutes=10)
# At the end, pod 0's agent keeps the control store this long for the other pods to see the end.
FINISH_LINGER_SECONDS = 30.0
# After a group of several pods ended in a failure of this pod's ranks: how long the agent looks
# whether another pod's rank left it first (its agent marks it within a few monitor intervals).
PEER_LEFT_WAIT_SECONDS = 3.0


class PodControl:
    """The learner pods' agents' agreement, in pod 0's control store (`store`): which generation
    the next group is. A store is one pod 0's life: a restarted pod 0 starts a new one, which the
    other agents take as a fresh start."""

    def __init__(self, store: dist.Store, pods: Pods, ranks: Sequence[int] = ()) -> None:
        self.store, self.pods, self.ranks = store, pods, ranks  # `ranks`: this pod's
        self.last: int | None = None  # the generation this agent last took part in

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
        try:
            return bool(self.store.check(["finished"]))
        except Exception:  # noqa: BLE001 - pod 0's store is gone: next_generation will tell
            return False

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


def notformed(unformed: Sequence[int], size: int, timeout: datetime.timedelta) -> str:
    return (f"learner rank{'s' if len(unformed) > 1 else ''} {', '.join(map(str, unformed))} of {size} "
            f"joined but did not form the process group within {timeout.total_seconds():.0f} s of "
            "its start (hung in init_process_group)")  # fmt: skip


# --- starting the ranks on one machine: torch's elastic agent ---

MONITOR_SECONDS = 0.5  # how often the agent looks at its ranks


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
    """The agent's bound on forming a group: `timeout` after its start, the ranks that have not
    come up (`missing`), or `form_timeout` later those hung in init_process_group, are named in
    `problem` and the ranks (`started()`) are killed, which ends the agent's run."""

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
        missing = [r for r in self.ranks if not came_up(self.folder, self.generation, r).exists()]
        if missing:
            self.missing = missing
            self._give_up(not_joined(missing, self.total, self.timeout))
            return
        if self._stopped.wait(self.form_timeout.total_seconds()):
            return
        unformed = [r for r in self.ranks if not formed(self.folder, self.generation, r).exists()]
        if unformed:
            self._give_up(notformed(unformed, self.total, self.timeout + self.form_timeout))

    def _give_up(self, problem: str) -> None:
        self.problem = problem
        log.error("%s: stopping the group", problem)
        for process in self.started():
            with contextlib.suppress(Exception):  # psutil.Error: it is gone already
                process.kill()


class StopForward(_Watcher):
    """The agent's stop request (preemption.stop_for: the learner's role failed elsewhere) passed
    on to each rank that is up as one SIGTERM: they save and leave, and no group is restarted."""

    name = "surreal-stop-forward"

    def __init__(self, started: Callable[[], list[Any]] = _started_here) -> None:
        self.started = started
        self._told: set[int] = set()
        super().__init__()

    def _watch(self) -> None:
        from surreal.runtime import preemption

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
    `learners` ranks under torch's elastic agent: a rank that fails makes the agent stop the
    others, and the group starts again from rank 0's last checkpoint (as LEARNER_GROUP's budget
    allows). A group not all joined `join_timeout` after its start raises GroupNotFormed. The
    ranks' store and rendezvous are files in a private temporary folder (never the checkpoint
    volume, maybe a network filesystem). Returns 0 when every rank finished, EXIT_PREEMPTED after
    SIGTERM or a stop request (each rank got SIGTERM, rank 0 saved), 1 when the group failed for good.

    Across learner pods (`pods`, default Pods.from_environ) this agent runs its pod's share of the
    ranks, in the generation the pods agree on in pod 0's control store."""
    import shutil
    import tempfile

    from surreal.runtime import preemption
    from surreal.runtime.exits import EXIT_PREEMPTED

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
    iface = interface_towards("127.0.0.1" if pods.pods == 1 else split_addr(pods.control)[0])
    if iface is not None:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", iface)
    control: PodControl | None = None
    server: dist.Store | None = None  # pod 0's control store, served while this agent lives
    counted = 0
    try:
        # A peer pod's losses are not counted, but bounded.
        for starts in range(4 * LEARNER_GROUP.retries + 1):
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
                if control.finished():  # the run is over: a peer's end only looked like a loss
                    _finish(control, server is not None)
                    return 0
            # A peer pod's loss is a disruption of this pod's group, not its failure.
            decision = decide(LEARNER_GROUP, EXIT_COLLECTIVE_FAILED if peer_lost else 1, counted)
            counted += decision.counted
            if decision.action is Action.GIVE_UP:
                break
            why = "a peer pod left" if peer_lost else "a rank failed"
            log.info("learner ranks: starting the group again (%s; %d counted restarts of %d)", why, counted,
                     LEARNER_GROUP.retries)  # fmt: skip
            time.sleep(decision.delay)
        log.error("learner ranks failed after %d group restarts", LEARNER_GROUP.retries)
        return 1
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _finish(control: PodControl, serving: bool) -> None:
    """Say the end; pod 0 (`serving` the store) keeps it until every pod has seen it."""
    with contextlib.suppress(Exception):
        control.finish()
        if serving:
            control.wait_finished(FINISH_LINGER_SECONDS)


def interface_towards(host: str) -> str | None:
    """The name of the interface this machine reaches `host` through (gloo listens there: the
    loopback on one machine, the one that reaches pod 0 across pods)."""
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

    from surreal.runtime import preemption
    from surreal.runtime.exits import EXIT_PREEMPTED

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
                      LEARNER_GROUP.retries, exc.format_msg())  # fmt: skip
        return None, peer_lost
    finally:
        forward.stop()
        watch.stop()
    log.info("every learner rank finished")
    return 0, False

"""Learner ranks: one update of a group of ranks is one learner's update on the union of their
batches; the ranks agree on every decision and end with the same parameters."""

from __future__ import annotations

import dataclasses
import datetime
import multiprocessing
import os
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import torch

from surreal.algorithms.ppo import PPO
from surreal.algorithms.ppo.presets import preset_for
from surreal.component import EXIT_SECONDS
from surreal.orchestrator import rank_agent as agent
from surreal.orchestrator.policy import LEARNER_GROUP, POLICIES, Action, decide
from surreal.orchestrator.rank_agent import MONITOR_SECONDS, JoinWatch
from surreal.protocol.types import Fragment
from surreal.runtime import ranks as ranks_module
from surreal.runtime.envs.make import spaces_for
from surreal.runtime.exits import EXIT_GROUP_NOT_FORMED, EXIT_NO_ACTORS
from surreal.runtime.onpolicy.actor import Actor
from surreal.runtime.onpolicy.batch import Batch
from surreal.runtime.onpolicy.learner import Learner
from surreal.runtime.ranks import (
    COLLECTIVE_TIMEOUT,
    FORM_TIMEOUT,
    HEARTBEAT_SECONDS,
    JOIN_TIMEOUT,
    PEER_TIMEOUT_SECONDS,
    GroupNotFormed,
    PeerLost,
    RankGroup,
    join_group,
    open_store,
)
from surreal.runtime.run import RoleFailed

ENV = "Pendulum-v1"
# One minibatch of the whole batch (2 ranks x 2 fragments x 16 steps x 2 envs = 128 rows): the
# group's gradient step is then the single learner's, whatever order the rows are in.
FULL_BATCH = dataclasses.replace(
    preset_for(ENV), envs_per_agent=2, fragment_length=16, steps_per_update=128,
    minibatch_size=128, epochs=3,
)  # fmt: skip
TIMEOUT = 120.0


def fragments(cfg, count: int, seed: int = 3) -> list[Fragment]:
    """`count` fragments of one actor under the initial policy, alternately from two workers."""
    actor = Actor(cfg, ENV, num_envs=2, seed=seed)
    actor.set_params(Learner(PPO(), cfg, spaces_for(ENV), 10_000, seed=1).params())
    return [Fragment(f"actor-{i % 2}", 0, actor.collect()) for i in range(count)]


def state_of(learner: Learner) -> dict[str, Any]:
    return {
        "params": [p.detach().numpy().copy() for p in learner.net.parameters()],
        "obs_mean": learner.obs_rms.mean.copy(),
        "obs_var": learner.obs_rms.var.copy(),
        "ret_var": learner.ret_rms.var.copy(),
        "version": learner.counters.version,
        "env_steps": learner.counters.env_steps,
        "episodes": learner.counters.episodes,
        "updates": learner.counters.updates,
        "skipped": learner.counters.skipped_updates,
    }


def _rank_main(rank: int, size: int, store_dir: str, job: dict[str, Any], out: Any) -> None:
    try:
        group = join_group(rank, size, open_store(f"file:{store_dir}", size, "test"))
        if job.get("poison_rank") == rank:  # this rank's loss goes non-finite
            real = Batch.mean
            Batch.mean = lambda self, per_row: real(self, per_row) * float("nan")  # type: ignore[method-assign]
        exp_dir = Path(job["exp_dir"]) if job.get("exp_dir") else None
        learner = Learner(PPO(), job["cfg"], spaces_for(ENV), 10_000, seed=1, exp_dir=exp_dir, group=group)
        result: dict[str, Any] = {"restored": state_of(learner), "stats": []}
        for batch in job["batches"][rank]:
            for fragment in batch:
                learner.add_fragment(fragment)
            while not learner.ready():
                pass
            result["stats"].append(learner.update())
        result["state"] = state_of(learner)
        result["status"] = learner.status(connected_actors=rank + 1)
        learner.close()
        group.close()
        out.put((rank, result))
    except BaseException:  # noqa: BLE001 - reported to the test
        out.put((rank, traceback.format_exc()))


def spawn(target: Any, size: int, *args: Any, linger: float = 10.0) -> dict[int, Any]:
    """`target(rank, *args, out)` in `size` processes; what each put on `out` as (rank, result),
    by rank. Processes still alive `linger` seconds after the last result are killed."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=(r, *args, out)) for r in range(size)]
    for p in procs:
        p.start()
    try:
        return dict(out.get(timeout=TIMEOUT) for _ in range(size))
    finally:
        for p in procs:
            p.join(timeout=linger)
            if p.is_alive():
                p.kill()


def run_group(tmp_path: Path, job: dict[str, Any], size: int = 2) -> list[dict[str, Any]]:
    """Run `job` on `size` rank processes; each rank's result."""
    results = spawn(_rank_main, size, size, str(tmp_path / "store"), job)
    for rank, result in results.items():
        assert not isinstance(result, str), f"rank {rank} failed:\n{result}"
    return [results[r] for r in range(size)]


def assert_same(a: dict[str, Any], b: dict[str, Any], atol: float = 0.0) -> None:
    for key in ("version", "env_steps", "episodes", "updates", "skipped"):
        assert a[key] == b[key], key
    for key in ("obs_mean", "obs_var", "ret_var"):
        np.testing.assert_allclose(a[key], b[key], rtol=1e-12 if atol else 0, atol=0, err_msg=key)
    for i, (x, y) in enumerate(zip(a["params"], b["params"], strict=True)):
        np.testing.assert_allclose(x, y, rtol=0, atol=atol, err_msg=f"parameter {i}")


def test_two_ranks_on_a_and_b_update_as_one_learner_on_a_plus_b(tmp_path):
    """The must-show: 2 ranks given batches A and B end with the parameters (and observation and
    return statistics, counters, version) of one learner given A+B, over three full-batch epochs
    (Adam's state carries between them) with advantage normalization and gradient clipping."""
    frags = fragments(FULL_BATCH, 4)
    a, b = frags[:2], frags[2:]
    # The reference runs in a fresh process too: torch's thread count (which earlier tests in this
    # process may have set) changes the initial weights' last bits.
    (reference,) = run_group(tmp_path, {"cfg": FULL_BATCH, "batches": [[a + b]]}, size=1)
    ref_stats, expected = reference["stats"][0], reference["state"]
    assert expected["version"] == 1 and expected["env_steps"] == 128

    ranks = run_group(tmp_path, {"cfg": FULL_BATCH, "batches": [[a], [b]]})
    for result in ranks:
        assert_same(result["state"], expected, atol=1e-6)
        stats = result["stats"][0]
        assert stats["grad_steps"] == ref_stats["grad_steps"] == 3
        assert stats["batch_steps"] == 128
        for key in ("policy_loss", "value_loss", "entropy", "approx_kl"):
            assert stats[key] == pytest.approx(ref_stats[key], rel=1e-4, abs=1e-6), key
    # Every rank holds the very same bytes, not just close ones.
    assert_same(ranks[0]["state"], ranks[1]["state"])
    # Status: the experiment's counters, and what each rank took in.
    status = ranks[0]["status"]
    assert status["env_steps"] == 128 and status["policy_version"] == 1
    assert [r["env_steps"] for r in status["learners"]] == [64, 64]


def test_ranks_with_uneven_shares_and_several_minibatches_stay_identical(tmp_path):
    """Rank 0 brings 3 fragments, rank 1 one (the group's minibatches are then uneven per rank),
    over two updates of 4 minibatches each: the ranks agree on the number of gradient steps and
    hold identical weights after each update."""
    cfg = dataclasses.replace(FULL_BATCH, minibatch_size=32, epochs=2, steps_per_update=128)
    frags = fragments(cfg, 8, seed=5)
    batches = [[frags[0:3], frags[4:7]], [frags[3:4], frags[7:8]]]
    ranks = run_group(tmp_path, {"cfg": cfg, "batches": batches})
    assert_same(ranks[0]["state"], ranks[1]["state"])
    assert ranks[0]["state"]["updates"] == 2 and ranks[0]["state"]["env_steps"] == 8 * 32
    for r in ranks:
        assert [s["grad_steps"] for s in r["stats"]] == [8.0, 8.0]


def test_the_group_updates_when_it_holds_a_batch_even_if_one_rank_brought_nothing(tmp_path):
    """An update is due when the group holds a batch, whoever's actors sent it (one learner takes
    whichever actor is faster too): rank 0 brings A+B, rank 1 nothing (its actor slow, or gone),
    and both end where one learner on A+B does."""
    frags = fragments(FULL_BATCH, 4)
    (reference,) = run_group(tmp_path, {"cfg": FULL_BATCH, "batches": [[frags]]}, size=1)
    ranks = run_group(tmp_path, {"cfg": FULL_BATCH, "batches": [[frags], [[]]]})
    for result in ranks:
        assert_same(result["state"], reference["state"], atol=1e-6)
        assert result["stats"][0]["batch_steps"] == 128
    assert [r["env_steps"] for r in ranks[0]["status"]["learners"]] == [128, 0]


def _late_fragment_main(rank: int, store_dir: str, cfg: Any, frags: list[Fragment], out: Any) -> None:
    try:
        group = join_group(rank, 2, open_store(f"file:{store_dir}", 2, "test"))
        learner = Learner(PPO(), cfg, spaces_for(ENV), 10_000, seed=1, group=group)
        assert group.store is not None
        if rank == 0:  # fills the group's batch alone
            for fragment in frags[:2]:
                learner.add_fragment(fragment)
            group.store.set("rank 0 added", "1")
        else:  # then its fragment comes
            group.store.wait(["rank 0 added"])
            learner.add_fragment(frags[2])
        while not learner.ready():
            pass
        stats = learner.update()
        out.put((rank, {"batch_steps": stats["batch_steps"], "next": len(learner.intake.batch),
                        "next_count": group.group_steps(1)}))  # fmt: skip
        learner.close()
        group.close()
    except BaseException:  # noqa: BLE001 - reported to the test
        out.put((rank, traceback.format_exc()))


def test_a_fragment_taken_after_the_groups_batch_is_full_is_the_next_updates(tmp_path):
    """One learner's batch ends with the fragment that fills it, and so does the group's: rank 1's
    fragment, taken once rank 0's two filled the batch, waits for the next update (counted there)
    instead of growing this one."""
    cfg = dataclasses.replace(FULL_BATCH, steps_per_update=64, minibatch_size=64)
    said = spawn(_late_fragment_main, 2, str(tmp_path / "store"), cfg, fragments(cfg, 3))
    for rank in (0, 1):
        assert not isinstance(said[rank], str), said[rank]
        assert said[rank]["batch_steps"] == 64 and said[rank]["next_count"] == 32
    assert (said[0]["next"], said[1]["next"]) == (0, 1)


def test_a_non_finite_loss_on_one_rank_skips_the_update_on_every_rank(tmp_path):
    """Trust checks decide the same way everywhere: rank 1's loss goes NaN, and both ranks keep
    their weights and version (the update is counted as skipped on both)."""
    frags = fragments(FULL_BATCH, 4)
    ranks = run_group(tmp_path, {"cfg": FULL_BATCH, "batches": [[frags[:2]], [frags[2:]]],
                                 "poison_rank": 1})  # fmt: skip
    for result in ranks:
        assert result["stats"] == [{}]
        state = result["state"]
        assert state["version"] == 0 and state["skipped"] == 1 and state["updates"] == 0
        for x, y in zip(state["params"], result["restored"]["params"], strict=True):
            np.testing.assert_array_equal(x, y)


def test_every_rank_resumes_from_rank_0s_checkpoint(tmp_path):
    """Rank 0 reads the checkpoint and sends it: rank 1, with no experiment folder of its own,
    starts from the same weights, statistics and counters."""
    frags = fragments(FULL_BATCH, 4)
    exp_dir = tmp_path / "exp"
    single = Learner(PPO(), FULL_BATCH, spaces_for(ENV), 10_000, seed=1, exp_dir=exp_dir)
    for fragment in frags:
        single.add_fragment(fragment)
    single.update()
    single.save(clean=True)
    saved = state_of(single)
    single.close()
    ranks = run_group(tmp_path, {"cfg": FULL_BATCH, "batches": [[], []], "exp_dir": str(exp_dir)})
    for result in ranks:
        assert_same(result["restored"], saved)


def test_the_group_of_one_has_no_store_and_identity_collectives():
    group = RankGroup()
    t = torch.arange(3.0)
    assert group.sum(t) is t and group.gather("x") == ["x"] and group.broadcast(5) == 5
    param = torch.nn.Parameter(torch.ones(3))
    param.grad = grad = torch.arange(3.0)
    group.sum_grads([param])  # a single learner's gradient is left as it is, not copied
    assert param.grad is grad
    group.commit(0)
    assert group.all_committed(0)
    with pytest.raises(ValueError, match="needs a store"):
        RankGroup(0, 2)


# --- faults: a rank that never comes, one that goes silent or leaves, a collective left alone ---


def test_a_rank_that_never_joins_fails_the_group_in_bounded_time(tmp_path):
    """Rank 1 never starts: rank 0 gives up after the join timeout and names it, instead of
    waiting (the learner then fails and says why). 10 runs: gave up after 1.01 s every time (bar
    30 s)."""
    store = open_store(f"file:{tmp_path}", 2, "gen")
    started = time.monotonic()
    with pytest.raises(GroupNotFormed, match=r"^learner rank 1 of 2 did not join the group within 1 s$"):
        join_group(0, 2, store, join_timeout=datetime.timedelta(seconds=1))
    print(f"gave up after {time.monotonic() - started:.2f} s")
    assert time.monotonic() - started < 30.0  # 1 s and a poll; the bar only catches "forever"


def test_a_rank_that_never_joins_fails_the_run_within_5_minutes() -> None:
    """The worst case from a learner's start to its run being Failed, when a rank hangs before it
    joins (it was ~24 minutes: JOIN_TIMEOUT once per group restart, 4 per learner, times the 6
    lives of the learner's budget). Now the agent's JoinWatch fails the learner with a fatal exit
    that neither launch_ranks nor the backend retries."""
    assert decide(POLICIES["learner"], EXIT_GROUP_NOT_FORMED, 0).action is Action.FAIL_ROLE
    assert GroupNotFormed("rank 1").code == EXIT_GROUP_NOT_FORMED
    start = (
        60.0  # the learner's process imports torch and reads its spec (seconds; JOIN_TIMEOUT's own allowance)
    )
    stop_the_rest = 30.0  # the supervisor's grace (5 s), a pod's terminationGracePeriodSeconds (30 s)
    # The later of the JoinWatch's two deadlines, from the group's start: every rank joined but
    # one hangs inside init_process_group. It comes before gloo's own timeout, which would count
    # as an ordinary failure (a group restart), however late a rank calls init_process_group.
    assert FORM_TIMEOUT.total_seconds() > 0
    assert JOIN_TIMEOUT + FORM_TIMEOUT < COLLECTIVE_TIMEOUT
    worst = (
        start
        + JOIN_TIMEOUT.total_seconds()  # the JoinWatch, from the group's start
        + FORM_TIMEOUT.total_seconds()  # then the ranks' process group formed, or not
        + MONITOR_SECONDS  # the agent sees the ranks the watch killed
        + EXIT_SECONDS  # the learner's process is gone (at most)
        + stop_the_rest
    )
    assert worst <= 300, worst


def sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])


def test_the_agent_names_the_ranks_that_never_came_up_and_stops_the_group(tmp_path):
    rank = sleeper()
    try:
        ranks_module.came_up(tmp_path, "gen", 0).touch()  # rank 0 came up; rank 1 never does
        watch = JoinWatch(tmp_path, "gen", 2, datetime.timedelta(seconds=0.1),
                          started=lambda: [psutil.Process(rank.pid)])  # fmt: skip
        watch.start()
        assert rank.wait(timeout=60) == -9  # killed: the agent's run ends
        watch.stop()
        assert watch.missing == [1]
    finally:
        rank.kill()
        rank.wait()


def test_a_group_that_joined_but_hangs_forming_is_stopped_and_named(tmp_path):
    """Every rank came up, rank 1 never left init_process_group (and rank 0 waits in it for
    rank 1): FORM_TIMEOUT later the agent stops the group and says so; the learner fails."""
    rank = sleeper()
    try:
        for r in range(2):
            ranks_module.came_up(tmp_path, "gen", r).touch()
        watch = JoinWatch(tmp_path, "gen", 2, datetime.timedelta(seconds=0.1),
                          started=lambda: [psutil.Process(rank.pid)],
                          form_timeout=datetime.timedelta(seconds=0.1))  # fmt: skip
        watch.start()
        assert rank.wait(timeout=60) == -9
        watch.stop()
        assert watch.missing == []
        assert watch.problem == ("learner ranks 0, 1 of 2 joined but did not form the process group "
                                 "within 0 s of its start (hung in init_process_group)")  # fmt: skip
        assert GroupNotFormed(watch.problem).code == EXIT_GROUP_NOT_FORMED
    finally:
        rank.kill()
        rank.wait()


def test_a_process_group_that_fails_to_form_is_fatal_not_a_restart(tmp_path, monkeypatch):
    store = open_store(f"file:{tmp_path}", 2, "gen")
    store.set("joined/1", "1")  # rank 1 joined

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("[gloo] Connection reset\n by peer")

    monkeypatch.setattr(ranks_module.dist, "init_process_group", refuse)
    with pytest.raises(GroupNotFormed, match=r"^learner rank 0 of 2 could not form the process group: "
                                             r".*Connection reset by peer$") as info:  # fmt: skip
        join_group(0, 2, store)
    assert info.value.code == EXIT_GROUP_NOT_FORMED


def test_a_group_whose_ranks_all_came_up_is_left_alone(tmp_path):
    rank = sleeper()
    try:
        for r in range(2):
            ranks_module.came_up(tmp_path, "gen", r).touch()
            ranks_module.formed(tmp_path, "gen", r).touch()
        watch = JoinWatch(tmp_path, "gen", 2, datetime.timedelta(seconds=0.1),
                          started=lambda: [psutil.Process(rank.pid)],
                          form_timeout=datetime.timedelta(seconds=0.1))  # fmt: skip
        watch.start()
        watch._thread.join(timeout=60)  # past its deadline: it looked, and ended
        assert not watch._thread.is_alive()
        assert watch.missing == [] and watch.problem is None and rank.poll() is None
        watch.stop()
    finally:
        rank.kill()
        rank.wait()


def test_a_stop_request_reaches_every_rank_as_sigterm_once(monkeypatch):
    """The learner's role failed elsewhere (on Kubernetes its watch saw the actors' Job fail):
    the agent's ranks get SIGTERM (they save and leave, as on a real one), late ones too, each
    once; without a request none is touched."""
    from surreal.runtime import preemption

    monkeypatch.setattr(preemption, "_requested", threading.Event())
    monkeypatch.setattr(preemption, "_failure", [])
    first, late = sleeper(), sleeper()
    up = [psutil.Process(first.pid)]
    try:
        forward = agent.StopForward(started=lambda: list(up))
        forward.start()
        forward._thread.join(timeout=3 * MONITOR_SECONDS)  # it looks every MONITOR_SECONDS
        assert first.poll() is None  # no request: left alone
        preemption.stop_for(RoleFailed(EXIT_NO_ACTORS, "no actor is left"))
        assert first.wait(timeout=60) == -15  # SIGTERM
        up.append(psutil.Process(late.pid))
        assert late.wait(timeout=60) == -15
        forward.stop()
        assert forward._told == {first.pid, late.pid}
    finally:
        for p in (first, late):
            p.kill()
            p.wait()


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_silent_peer_is_lost_after_the_peer_timeout_and_a_leaving_one_at_once(tmp_path, monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(ranks_module.time, "monotonic", clock)
    store = torch.distributed.FileStore(str(tmp_path / "store"), 2)
    me, peer = RankGroup(0, 2, store), RankGroup(1, 2, store)
    for _ in range(3):  # both beat: nobody is lost
        peer.heartbeat()
        me.keep_alive()
        clock.now += HEARTBEAT_SECONDS
    clock.now += PEER_TIMEOUT_SECONDS - 2 * HEARTBEAT_SECONDS  # the peer falls silent
    me.keep_alive()
    clock.now += 2 * HEARTBEAT_SECONDS
    with pytest.raises(PeerLost, match=r"learner rank 1 has been silent for 6\d s"):
        me.keep_alive()

    other = RankGroup(0, 2, torch.distributed.FileStore(str(tmp_path / "store2"), 2))
    RankGroup(1, 2, other.store).leave(137)
    clock.now += HEARTBEAT_SECONDS
    with pytest.raises(PeerLost, match=r"learner rank 1 left \(exit 137\)"):
        other.keep_alive()


def _join_then(rank: int, store_dir: str, peer: str, out: Any) -> None:
    """Rank 0 sums; rank 1 joins, then never takes part until it is killed (`peer` "hangs") or
    dies in the middle of the sum (`peer` "dies": rank 0 waits in it first)."""
    try:
        group = join_group(rank, 2, open_store(f"file:{store_dir}", 2, "gen"),
                           timeout=datetime.timedelta(seconds=3 if peer == "hangs" else 60))  # fmt: skip
        if rank == 1:
            out.put((rank, "joined"))
            if peer == "dies":
                time.sleep(1.0)  # rank 0 is in its all-reduce by now
                os._exit(137)
            time.sleep(600)
        started = time.monotonic()
        try:
            group.sum(torch.ones(4))
            out.put((rank, "returned"))
        except Exception as exc:  # noqa: BLE001 - reported to the test
            out.put((rank, f"raised after {time.monotonic() - started:.1f} s: {type(exc).__name__}: {exc}"))
    except BaseException:  # noqa: BLE001
        out.put((rank, traceback.format_exc()))


@pytest.mark.parametrize("peer", ["hangs", "dies"])
def test_no_rank_waits_in_a_collective_forever(tmp_path, peer):
    """A peer that joined and then never runs the collective (hung): the all-reduce raises after
    the group's timeout (3 s here, COLLECTIVE_TIMEOUT in a run); one that dies in it (its
    connection closes): it raises at once. Either way the rank fails with CollectiveFailed, which
    says what happened (not gloo's bare RuntimeError, which the CLI called a bug), to be
    restarted from the checkpoint with its group. 10 runs of the hung peer: raised after 3.0 s
    every time (bar 60 s, far below the dying peer's 60 s timeout)."""
    said = spawn(_join_then, 2, str(tmp_path / "store"), peer, linger=0.0)  # rank 1 sleeps: killed
    print(said[0][:300])
    assert said[1] == "joined"
    assert said[0].startswith("raised after "), said[0]
    assert float(said[0].split()[2]) < 60.0, said[0]  # 3 s and the transport's own; not forever
    assert "CollectiveFailed: learner rank 0 lost its group in an all-reduce: a peer rank or pod" in said[0]


def test_the_agent_starts_a_failing_group_again_as_often_as_the_learner_groups_policy_allows(monkeypatch):
    """Its budget is policy.LEARNER_GROUP's, decided by the one `decide`: a rank's failure counts,
    and past the budget the learner fails (exit 1, which the learner role's own policy counts)."""
    monkeypatch.setattr(os, "environ", dict(os.environ))  # the agent sets its ranks' variables
    groups: list[int] = []
    monkeypatch.setattr(agent, "_run_group", lambda *args, **kwargs: groups.append(args[2]) or (None, False))
    assert agent.launch_ranks(2) == 1
    assert groups == list(range(LEARNER_GROUP.retries + 1))

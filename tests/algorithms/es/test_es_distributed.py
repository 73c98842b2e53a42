"""The ES roles over real gRPC on 127.0.0.1: a master, two workers and an evaluator."""

from __future__ import annotations

import dataclasses
import json
import signal
from pathlib import Path

import pytest
from roles import free_port, read_status, run_in_thread, spawn, wait_for

from surreal.runtime.es import master
from surreal.runtime.es.actor import run_actor
from surreal.runtime.es.evaluator import run_evaluator
from surreal.runtime.es.learner import run_learner
from surreal.runtime.es.presets import preset_for
from surreal.runtime.run import RunContext

AGENTS_IN_WORKER = 2
CFG = dataclasses.replace(preset_for("CartPole-v1"), eval_episodes=3, checkpoint_every=3,
                          final_eval_timeout=60.0, flush_interval=0.05)  # fmt: skip


@pytest.fixture
def context(tmp_path: Path):
    """context(total_steps, index=0): a RunContext for this test's master on a free port."""
    addr = f"127.0.0.1:{free_port()}"

    def make(total_steps: int, index: int = 0) -> RunContext:
        return RunContext(
            env_id="CartPole-v1", seed=0, total_steps=total_steps, num_agents=2 * AGENTS_IN_WORKER,
            exp_dir=tmp_path, learner_addr=addr, token="t0k", index=index,
            agents_in_worker=AGENTS_IN_WORKER,
        )  # fmt: skip

    return make


def run_roles(cfg, context, total: int, timeout: float) -> list:
    roles = [run_in_thread(run_learner, cfg, context(total)),
             *(run_in_thread(run_actor, cfg, context(total, i)) for i in range(2)),
             run_in_thread(run_evaluator, cfg, context(total))]  # fmt: skip
    for thread, _ in roles:
        thread.join(timeout=timeout)
    return [r.get("rc") for _, r in roles]


def test_master_workers_and_evaluator_finish_a_run(tmp_path, context):
    total = 20_000
    cfg = dataclasses.replace(CFG, eval_interval=5_000)
    assert run_roles(cfg, context, total, timeout=120) == [0, 0, 0, 0]
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["done"] is True and status["env_steps"] >= total
    assert status["agents_reporting"] == 2 * AGENTS_IN_WORKER
    assert status["updates"] >= 1 and status["eval_return"] is not None
    assert 0 <= status["actor_wait_share"] <= 1, status  # what the workers said of their time
    assert set(status["results_rejected"]) >= {"stale", "unknown_version", "unknown_seed", "nan"}
    assert (tmp_path / "checkpoints" / "latest.pt").exists()
    assert list((tmp_path / "tb").iterdir())


def test_bursty_workers_start_every_round_on_one_version(tmp_path, monkeypatch):
    """Pendulum's episodes all last 200 steps, so each worker's 32 agents finish together and
    each burst is one update's worth (32 pairs). The master waits for the round (both bursts),
    makes its two updates, and both workers start the next round on the version those made: the
    second update's results are one version old, the first's fresh (0.5 on average). Without the
    rounds, a worker started whatever was current when its burst was done, one made just before
    its own results landed, and every result was about two versions old.

    A round's first burst waits for the second at most as long as the round took to produce it
    (at least MIN_ROUND_WAIT_SECONDS), then updates short. Three threads share two loaded cores
    here, and a second burst once came later than that: a short round, staleness 0.8 over the last
    10 updates. The wait is raised to the test's own timeout, so every round is whole (a short
    round is test_a_lost_worker_makes_short_rounds_and_the_run_still_ends's)."""
    monkeypatch.setattr(master, "MIN_ROUND_WAIT_SECONDS", 300.0)
    agents_in_worker, addr = 32, f"127.0.0.1:{free_port()}"
    cfg = dataclasses.replace(preset_for("Pendulum-v1"), policy="linear", population=16,
                              eval_episodes=1, eval_interval=10**9, checkpoint_every=100)  # fmt: skip

    def ctx(index: int) -> RunContext:
        return RunContext(
            env_id="Pendulum-v1", seed=0, total_steps=16 * 64 * 400, num_agents=2 * agents_in_worker,
            exp_dir=tmp_path, learner_addr=addr, token="t0k", index=index,
            agents_in_worker=agents_in_worker, has_evaluator=False,
        )  # fmt: skip

    roles = [run_in_thread(run_learner, cfg, ctx(0)),
             *(run_in_thread(run_actor, cfg, ctx(i)) for i in range(2))]  # fmt: skip
    for thread, _ in roles:
        thread.join(timeout=300)
    assert [r.get("rc") for _, r in roles] == [0, 0, 0]
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["pairs_per_update"] == agents_in_worker and status["updates"] >= 24, status
    assert status["round_pairs"] == 2 * agents_in_worker
    assert status["short_rounds"] == 0, status
    assert status["staleness"] == 0.5, status  # mean of the last 10 updates (1.7-2.4 without rounds)


@pytest.mark.slow
def test_a_lost_worker_makes_short_rounds_and_the_run_still_ends(tmp_path):
    """One of two bursty workers is killed: every later round lacks its pairs, waits its time
    (at least 2 s), is updated short and counted. After 3 such rounds the worker is started again,
    as its supervisor or Job would: the run reaches its budget and ends, every worker seeing the
    end (a worker that never came back would be waited for RELEASE_SECONDS, 60 s)."""
    agents_in_worker, addr = 32, f"127.0.0.1:{free_port()}"
    cfg = dataclasses.replace(preset_for("Pendulum-v1"), policy="linear", population=16,
                              eval_episodes=1, eval_interval=10**9, checkpoint_every=100)  # fmt: skip
    total, status_path, log = 10 * 64 * 400, tmp_path / "status.json", tmp_path / "roles.log"

    def ctx(index: int) -> RunContext:
        return RunContext(
            env_id="Pendulum-v1", seed=0, total_steps=total, num_agents=2 * agents_in_worker,
            exp_dir=tmp_path, learner_addr=addr, token="t0k", index=index,
            agents_in_worker=agents_in_worker, has_evaluator=False,
        )  # fmt: skip

    master = spawn("es", "learner", ctx(0), cfg, log)
    workers = [spawn("es", "actor", ctx(i), cfg, log) for i in range(2)]
    try:
        wait_for(lambda: read_status(status_path).get("updates", 0) >= 4, timeout=120)
        workers[1].send_signal(signal.SIGKILL)
        workers[1].wait()
        wait_for(lambda: read_status(status_path).get("short_rounds", 0) >= 3, timeout=120)
        workers[1] = spawn("es", "actor", ctx(1), cfg, log)
        assert master.wait(timeout=300) == 0
        assert [w.wait(timeout=30) for w in workers] == [0, 0]
    finally:
        for proc in (master, *workers):
            if proc.poll() is None:
                proc.kill()
    status = read_status(status_path)
    assert status["done"] is True and status["env_steps"] >= total, status
    assert status["short_rounds"] >= 3 and status["agents_reporting"] == 2 * agents_in_worker, status


@pytest.mark.slow
def test_sigkilled_master_resumes_and_workers_reconnect(tmp_path, context):
    total, status_path, log = 300_000, tmp_path / "status.json", tmp_path / "roles.log"
    master_ctx = dataclasses.replace(context(total), has_evaluator=False)
    master = spawn("es", "learner", master_ctx, CFG, log)
    workers = [spawn("es", "actor", context(total, i), CFG, log) for i in range(2)]
    try:
        wait_for(lambda: read_status(status_path).get("updates", 0) >= 8, timeout=120)
        master.send_signal(signal.SIGKILL)
        master.wait()
        before = read_status(status_path)
        master = spawn("es", "learner", master_ctx, CFG, log)
        assert master.wait(timeout=300) == 0
        assert [w.wait(timeout=30) for w in workers] == [0, 0]  # reconnected, then saw `done`
    finally:
        for proc in (master, *workers):
            if proc.poll() is None:
                proc.kill()
    after = read_status(status_path)
    assert after["done"] is True and after["env_steps"] >= total
    assert after["updates"] >= before["updates"] - CFG.checkpoint_every
    assert "resumed from checkpoint" in log.read_text()

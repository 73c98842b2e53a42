"""The PPO roles over real gRPC on 127.0.0.1: a learner, two actors and an evaluator."""

from __future__ import annotations

import dataclasses
import json
import signal
from pathlib import Path

import pytest
from roles import free_port, read_status, run_in_thread, spawn, wait_for

from surreal.algorithms.ppo import PPO
from surreal.algorithms.ppo.presets import preset_for
from surreal.runtime.onpolicy.actor import run_actor
from surreal.runtime.onpolicy.evaluator import run_evaluator
from surreal.runtime.onpolicy.learner import run_learner
from surreal.runtime.run import RunContext

CFG = dataclasses.replace(
    preset_for("CartPole-v1"), eval_interval=1024, eval_episodes=2, checkpoint_every=2,
    final_eval_timeout=60.0,
)  # fmt: skip


@pytest.fixture
def context(tmp_path: Path):
    """context(total_steps, index=0): a RunContext for this test's learner on a free port."""
    addr = f"127.0.0.1:{free_port()}"

    def make(total_steps: int, index: int = 0) -> RunContext:
        return RunContext(
            env_id="CartPole-v1", seed=0, total_steps=total_steps, num_agents=2,
            exp_dir=tmp_path, learner_addr=addr, token="t0k", index=index,
        )  # fmt: skip

    return make


def test_learner_actors_and_evaluator_finish_a_run(tmp_path, context):
    total = 3072
    learner = run_in_thread(run_learner, PPO(), CFG, context(total))
    actors = [run_in_thread(run_actor, PPO(), CFG, context(total, i)) for i in range(2)]
    evaluator = run_in_thread(run_evaluator, PPO(), CFG, context(total))
    for thread, _ in (learner, *actors, evaluator):
        thread.join(timeout=120)
    assert [r.get("rc") for _, r in (learner, *actors, evaluator)] == [0, 0, 0, 0]
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["done"] is True
    assert total <= status["env_steps"] < total + 2 * 128
    # Every fragment (128 steps) was either trained on or dropped as too stale.
    trained_or_dropped = status["updates"] * 256 + status["dropped_fragments"] * 128
    assert total - 256 <= trained_or_dropped <= total + 256
    assert status["eval_return"] is not None
    assert (tmp_path / "checkpoints" / "latest.pt").exists()
    assert list((tmp_path / "tb").iterdir())


def test_learner_without_evaluator_evaluates_the_final_policy_itself(tmp_path, context):
    ctx = dataclasses.replace(context(512), has_evaluator=False)
    learner = run_in_thread(run_learner, PPO(), CFG, ctx)
    actor = run_in_thread(run_actor, PPO(), CFG, context(512))
    for thread, _ in (learner, actor):
        thread.join(timeout=60)
    assert learner[1].get("rc") == 0 and actor[1].get("rc") == 0
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["done"] is True and status["eval_return"] is not None


@pytest.mark.slow
def test_sigkilled_learner_resumes_its_counters_and_actors_reconnect(tmp_path, context):
    total, status_path, log = 12_288, tmp_path / "status.json", tmp_path / "roles.log"
    learner_ctx = dataclasses.replace(context(total), has_evaluator=False)
    learner = spawn("ppo", "learner", learner_ctx, CFG, log)
    actor = spawn("ppo", "actor", context(total), CFG, log)
    try:
        wait_for(lambda: read_status(status_path).get("updates", 0) >= 6, timeout=120)
        learner.send_signal(signal.SIGKILL)
        learner.wait()
        before = read_status(status_path)
        learner = spawn("ppo", "learner", learner_ctx, CFG, log)
        assert learner.wait(timeout=180) == 0
        assert actor.wait(timeout=30) == 0  # reconnected, then saw `done`
    finally:
        for proc in (learner, actor):
            if proc.poll() is None:
                proc.kill()
    after = read_status(status_path)
    assert after["done"] is True and after["env_steps"] >= total
    # The restart resumed the checkpoint (taken every 2 updates), not a fresh learner.
    assert after["updates"] >= before["updates"] - CFG.checkpoint_every
    assert after["updates"] < total // CFG.steps_per_update + 2
    assert "resumed from checkpoint" in log.read_text()

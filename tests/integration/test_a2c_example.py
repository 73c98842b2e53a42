"""A researcher's algorithm from one file (examples/a2c.py, `--algo examples.a2c:A2C`) through the
installed command, with what the runtime gives every algorithm: two learner ranks, a scale while it
runs, a SIGTERM to its learner that loses no update, its policy in Python (load_policy) and on
video (record). That it learns is proven in
tests/surreal/test_own_algorithm.py (serial, bounded by env steps); the same command with 200k
steps, on each backend, is in the closing note of issue 38."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from cli_harness import RUN_TIMEOUT, Cli, ended, frozen, running, status_after, wait_for
from test_cli_scale import scaled
from test_fault_tolerance import dead
from test_preemption import clean_saves_before, resumed

from surreal import load_policy

ROOT = Path(__file__).resolve().parents[2]
STEPS = 300_000  # as when it was a bet on a loaded 2-core machine (4-6k steps/s); held now
pytestmark = pytest.mark.slow


def test_a2c_from_its_file_trains_with_two_ranks_scales_and_its_policy_loads(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli.env["PYTHONPATH"] = str(ROOT)  # where `surreal create` finds examples/, as a user's shell would
    cli.run("create", "a2c", "--algo", "examples.a2c:A2C", "--env", "CartPole-v1", "--learners", "2",
            "--steps", str(STEPS), "--seed", "0", "--detach", timeout=60.0)  # fmt: skip
    wait_for(lambda: running(cli, "a2c", min_updates=3), RUN_TIMEOUT, "the ranks to update", poll=0.05)
    # The actors frozen (SIGSTOP) from here to the scale, and again from the scale to the restart's
    # resume: the run cannot end before its faults, however fast the machine (STEPS was a bet on
    # a loaded machine's 4-6k steps/s).
    with frozen(cli, "a2c"):
        held = status_after(cli, "a2c", time.time())
        assert held["env_steps"] < STEPS // 2 and not held.get("done"), held
        assert "4 agents" in scaled(cli, "a2c", 4)  # continues the actors it retires, to stop cleanly
    with frozen(cli, "a2c"):
        # SIGTERM to the learner (its ranks' agent passes it on): rank 0 saves, and the restarted
        # group resumes exactly there.
        victim = cli.component("a2c", "learner")
        os.kill(victim["pid"], signal.SIGTERM)
        wait_for(lambda: dead(victim["pid"]), 60.0, "the learner to exit", poll=0.01)
        how, *counters = resumed(cli, "a2c")
    log = cli.run("logs", "a2c", "learner", "--lines", "100000").stdout
    assert (how, counters) == ("clean", clean_saves_before(log, 1)[-1]), log[-3000:]

    final = wait_for(lambda: ended(cli, "a2c"), RUN_TIMEOUT * 2, "the run to end", poll=0.5)
    assert final["phase"] == "Succeeded" and final["env_steps"] >= STEPS, final
    assert final["algo"] == "examples.a2c:A2C" and final["agents"] == 4, final
    assert final["skipped_updates"] == 0 and sorted(r["rank"] for r in final["learners"]) == [0, 1], final

    monkeypatch.setenv("SURREAL_HOME", str(cli.home))
    policy = load_policy("a2c")  # imports examples.a2c from where the run's components did
    assert (policy.eval_return, policy.eval_episodes) == (final["eval_return"], final["eval_episodes"])
    env = policy.make_env()
    obs, _ = env.reset(seed=0)
    assert env.action_space.contains(policy.act(obs))
    env.close()
    video = tmp_path / "a2c.gif"
    cli.run("record", "a2c", "-o", str(video), "--episodes", "1", timeout=120.0)
    assert video.stat().st_size > 0

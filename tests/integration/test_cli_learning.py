"""The README's main job, through the installed command: distributed PPO learns CartPole-v1.

Bounded by environment steps (100,000), never by seconds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SURREAL = shutil.which("surreal", path=str(Path(sys.executable).parent))
CONTRACT_FIELDS = {
    "name", "algo", "env", "backend", "phase", "env_steps", "updates", "policy_version", "episodes",
    "train_return", "eval_return", "steps_per_second", "elapsed_seconds", "components",
}  # fmt: skip


@pytest.mark.slow
def test_ppo_solves_cartpole_within_100k_steps(tmp_path: Path) -> None:
    assert SURREAL, "the surreal command is not installed"
    env = {**os.environ, "SURREAL_HOME": str(tmp_path)}
    create = [SURREAL, "create", "cartpole", "--algo", "ppo", "--env", "CartPole-v1",
              "--agents", "2", "--steps", "100000", "--seed", "1"]  # fmt: skip
    result = subprocess.run(create, env=env, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]

    out = subprocess.run([SURREAL, "status", "cartpole", "-o", "json"], env=env,
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout)
    assert CONTRACT_FIELDS <= status.keys()
    assert status["phase"] == "Succeeded"
    assert (status["name"], status["algo"], status["env"], status["backend"]) == (
        "cartpole", "ppo", "CartPole-v1", "local",
    )  # fmt: skip
    # The run stops at the first fragment boundary past 100,000 steps.
    assert 100_000 <= status["env_steps"] < 100_000 + 2 * 4 * 32 * 2
    assert status["best_eval_return"] >= 475, status
    assert status["updates"] > 0 and status["policy_version"] > 0 and status["episodes"] > 0
    roles = sorted(c["role"] for c in status["components"])
    assert roles == ["actor", "actor", "evaluator", "learner"]
    assert all(c["restarts"] == 0 and c["state"] == "Succeeded" for c in status["components"])

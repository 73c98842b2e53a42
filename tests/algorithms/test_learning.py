"""Learning tests, bounded by env steps (never by seconds), through the serial harness."""

from __future__ import annotations

import pytest

from surreal.algorithms.ppo.presets import preset_for
from surreal.algorithms.ppo.serial import train_serial


@pytest.mark.slow
def test_cartpole_preset_solves_cartpole_within_100k_steps_with_two_agents():
    # 390 updates of 2 agents x 4 envs x 32 steps = 99,840 env steps.
    result = train_serial(preset_for("CartPole-v1"), "CartPole-v1", total_steps=99_840, seed=0, num_agents=2)
    assert result.env_steps <= 100_000
    assert result.final_return >= 475, result.evals

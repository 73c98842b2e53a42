"""PPOConfig validation and the presets."""

from __future__ import annotations

import dataclasses

import pytest

from surreal.algorithms.ppo import PPO
from surreal.algorithms.ppo.config import PPOConfig
from surreal.algorithms.ppo.presets import MINIGRID, PRESETS, preset_for
from surreal.runtime.envs.make import resolve_env


@pytest.mark.parametrize("env_id", sorted(PRESETS))
def test_presets_are_valid(env_id):
    preset_for(env_id).validate()


def test_unknown_env_gets_the_defaults():
    assert preset_for("Acrobot-v1") == PPOConfig()


def test_a_minigrid_environment_gets_the_minigrid_preset_by_its_entry_point():
    """Any MiniGrid id (and a user's module that registers one): told by the constructor's module,
    as the spec records it, so a component needs no minigrid import to find it."""
    facts = dataclasses.replace(
        resolve_env("CartPole-v1"),
        env="minigrid:MiniGrid-DoorKey-5x5-v0",
        entry_point="minigrid.envs:DoorKeyEnv",
    )
    assert preset_for(facts.env, resolved=facts) == MINIGRID
    MINIGRID.validate()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"epochs": 0}, "ppo.epochs must be an integer from 1 to 1,000, got 0"),
        ({"minibatch_size": 4096, "steps_per_update": 2048}, "ppo.minibatch_size must be <="),
        ({"gamma": 1.5}, "ppo.gamma must be > 0 and <= 1, got 1.5"),
        ({"activation": "gelu"}, "ppo.activation must be one of tanh, relu, got 'gelu'"),
        ({"target_kl": 0.0}, "ppo.target_kl must be > 0, got 0.0"),
        ({"hidden_sizes": ()}, "ppo.hidden_sizes must be 1 to 64 widths"),
        ({"fragment_length": True}, "ppo.fragment_length must be an integer"),
        ({"eval_episodes": 10**8}, "ppo.eval_episodes must be an integer from 1 to 1,000, got 100,000,000"),
        ({"hidden_sizes": (10**5, 10**5)}, "ppo.hidden_sizes must be 1 to 64 widths from 1 to 65,536"),
        ({"final_eval_timeout": 1e9}, "ppo.final_eval_timeout must be >= 0.001 and <= 604800, got 1"),
    ],
)
def test_validate_names_the_bad_field(change, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(PPOConfig(), **change).validate()


def test_check_env_supported():
    PPO().check_env("Pendulum-v1")
    with pytest.raises(ValueError, match="unknown environment 'Nope-v0'"):
        PPO().check_env("Nope-v0")
    PPO().check_env("Blackjack-v1")  # Tuple observations: a leaf each (test_obs_leaves.py)

"""The rule by which PPO presets follow the number of agents (algorithms/ppo/scaling.py)."""

from __future__ import annotations

import math

import pytest

from surreal.algorithms.ppo.config import PPOConfig
from surreal.algorithms.ppo.presets import PRESETS, default_steps, preset_for
from surreal.algorithms.ppo.scaling import MIN_FRAGMENT, REFERENCE_AGENTS, scale, scale_steps
from surreal.spec import build_spec

AGENTS = (1, 2, 3, 8, 64, 100, 512, 4096)


@pytest.mark.parametrize("env_id", sorted(PRESETS))
def test_two_agents_get_the_preset_unchanged(env_id):
    assert scale(PRESETS[env_id], REFERENCE_AGENTS) == PRESETS[env_id]
    assert preset_for(env_id) == PRESETS[env_id]


@pytest.mark.parametrize("env_id", [*sorted(PRESETS), "Acrobot-v1"])
@pytest.mark.parametrize("agents", AGENTS)
def test_the_rule_keeps_its_promises(env_id, agents):
    base = PRESETS.get(env_id, PPOConfig())
    cfg = scale(base, agents)
    cfg.validate()
    envs, envs0 = agents * cfg.envs_per_agent, REFERENCE_AGENTS * base.envs_per_agent
    # 1. total envs stay near the preset's while they can, then one per agent
    assert cfg.envs_per_agent >= 1 and (envs0 // 2 < envs <= envs0 or cfg.envs_per_agent == 1)
    # 2. fragments between the floor and the preset's length
    assert min(MIN_FRAGMENT, base.fragment_length) <= cfg.fragment_length <= base.fragment_length
    # 3. a batch is one fragment of every env, and at least the preset's
    assert cfg.steps_per_update == max(base.steps_per_update, envs * cfg.fragment_length)
    # 4. minibatches, budget and evaluation interval grow by the square root of the batch's growth,
    #    the learning rate by its fourth root
    root = math.sqrt(cfg.steps_per_update / base.steps_per_update)
    assert cfg.minibatch_size == min(cfg.steps_per_update, round(base.minibatch_size * root))
    assert cfg.learning_rate == pytest.approx(base.learning_rate * math.sqrt(root))
    assert cfg.eval_interval == round(base.eval_interval * root)
    assert scale_steps(1_000_000, base, agents) == round(1_000_000 * root)
    # what is not about scale is left alone
    assert (cfg.epochs, cfg.gamma, cfg.clip_coef, cfg.hidden_sizes) == (
        base.epochs, base.gamma, base.clip_coef, base.hidden_sizes
    )  # fmt: skip


def test_the_headline_command_gets_a_batch_per_round_and_a_larger_budget():
    """`surreal create exp1 --algo ppo --agents 512` (CartPole): 512 envs of 32-step fragments per
    16,384-step batch, 8 minibatches, 800k steps (the 2-agent preset: 256, 1, 100k)."""
    spec = build_spec("exp1", flags={"algo": "ppo", "agents": 512})
    cfg = spec.config
    assert (cfg.envs_per_agent, cfg.fragment_length, cfg.steps_per_update) == (1, 32, 16_384)
    assert cfg.steps_per_update // cfg.minibatch_size == 8
    assert spec.steps == 800_000 == default_steps("CartPole-v1", 512)
    assert build_spec("exp1", flags={"algo": "ppo"}).steps == 100_000


def test_flags_and_sets_still_win_over_the_scaled_preset():
    spec = build_spec("x", flags={"algo": "ppo", "agents": 512, "steps": 50_000},
                      overrides={"fragment_length": "64", "envs_per_agent": "2"})  # fmt: skip
    assert spec.steps == 50_000
    assert (spec.config.fragment_length, spec.config.envs_per_agent) == (64, 2)
    assert spec.config.steps_per_update == 16_384  # the rest of the scaled preset stays


def test_halfcheetah_fragments_stay_long_and_the_batch_grows():
    """HalfCheetah's preset: 128-step fragments. 64 agents: one env each, a 8,192-step batch."""
    cfg = preset_for("HalfCheetah-v5", 64)
    assert (cfg.envs_per_agent, cfg.fragment_length, cfg.steps_per_update) == (1, 128, 8192)
    assert cfg.minibatch_size == round(1024 * math.sqrt(2))
    assert default_steps("HalfCheetah-v5", 64) == round(1_000_000 * math.sqrt(2))
    big = preset_for("HalfCheetah-v5", 512)
    assert (big.envs_per_agent, big.fragment_length, big.steps_per_update) == (1, 128, 65_536)


def test_agents_must_be_positive():
    with pytest.raises(ValueError, match="agents must be >= 1"):
        scale(PPOConfig(), 0)

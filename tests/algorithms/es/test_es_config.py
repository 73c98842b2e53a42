"""ES configuration through the spec layer: presets, validation, one clear error per problem."""

from __future__ import annotations

import dataclasses
import re

import pytest

from surreal.runtime.es.config import ESConfig
from surreal.runtime.es.presets import PRESETS, preset_for
from surreal.spec import SpecError, build_spec


@pytest.mark.parametrize("env_id", sorted(PRESETS))
def test_every_preset_is_valid_and_used_by_the_spec(env_id):
    PRESETS[env_id].validate()
    spec = build_spec("x", flags={"algo": "es", "env": env_id})
    assert spec.config == preset_for(env_id)


def test_halfcheetah_with_many_agents_keeps_top_directions_and_anneals_and_an_override_wins():
    few = build_spec("x", flags={"algo": "es", "env": "HalfCheetah-v5", "agents": 16}).config
    assert (few.top_fraction, few.anneal_lr) == (1.0, False)
    many = build_spec("x", flags={"algo": "es", "env": "HalfCheetah-v5", "agents": 512}).config
    assert (many.top_fraction, many.anneal_lr) == (0.125, True) and many.round_pairs(512) == 512
    assert dataclasses.replace(many, top_fraction=1.0, anneal_lr=False) == few
    mine = build_spec("x", flags={"algo": "es", "env": "HalfCheetah-v5", "agents": 512},
                      overrides={"top_fraction": "1.0"}).config  # fmt: skip
    assert (mine.top_fraction, mine.anneal_lr) == (1.0, True)


def test_overrides_reach_the_config():
    spec = build_spec("x", flags={"algo": "es"}, overrides={"es.sigma": "0.5", "policy": "mlp",
                                                             "hidden_sizes": "16,16"})  # fmt: skip
    assert (spec.config.sigma, spec.config.policy, spec.config.hidden_sizes) == (0.5, "mlp", (16, 16))


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("bogus", "1", "unknown setting 'bogus'"),
        ("sigma", "abc", "es.sigma: expected a number"),
        ("population", "2.5", "es.population: expected an integer"),
        ("population", "0", "es.population must be an integer from 1 to 1,000,000"),
        ("policy", "cnn", "es.policy must be one of linear, mlp"),
        ("top_fraction", "1.5", "es.top_fraction must be > 0 and <= 1"),
        ("handout_ratio", "0.5", "es.handout_ratio must be >= 1"),
        ("max_staleness", "-1", "es.max_staleness must be an integer from 0 to 1,000,000"),
    ],
)
def test_bad_settings_name_the_problem(key, value, message):
    with pytest.raises(SpecError, match="^" + re.escape(message)):
        build_spec("x", flags={"algo": "es"}, overrides={key: value})


def test_linear_policy_ignores_hidden_sizes():
    dataclasses.replace(ESConfig(), policy="linear", hidden_sizes=()).validate()
    with pytest.raises(ValueError, match="hidden_sizes"):
        dataclasses.replace(ESConfig(), policy="mlp", hidden_sizes=()).validate()

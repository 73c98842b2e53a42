from __future__ import annotations

from pathlib import Path

import pytest

from surreal.spec import SpecError, build_spec, load_spec_file, parse_set


def spec(**kw):
    kw.setdefault("flags", {"algo": "ppo"})
    return build_spec(kw.pop("name", "exp1"), **kw)


def test_preset_then_file_then_flags_then_set(tmp_path: Path) -> None:
    cfg = tmp_path / "exp.yaml"
    cfg.write_text("env: Pendulum-v1\nagents: 3\nppo:\n  epochs: 7\n  learning_rate: 0.001\n")
    s = spec(
        flags={"algo": "ppo", "agents": 5},
        config_file=cfg,
        overrides=parse_set(["ppo.learning_rate=0.002", "gamma=0.9", "seed=4"]),
    )
    assert s.env == "Pendulum-v1"
    assert s.agents == 5  # flag beats file
    assert s.seed == 4
    assert s.config.epochs == 7  # file beats preset
    assert s.config.learning_rate == 0.002  # --set beats file
    assert s.config.gamma == 0.9


def test_tuple_and_bool_values_are_coerced() -> None:
    s = spec(overrides={"hidden_sizes": "32,16", "norm_obs": "false", "target_kl": "none"})
    assert s.config.hidden_sizes == (32, 16)
    assert s.config.norm_obs is False
    assert s.config.target_kl is None


def test_round_trip_through_the_spec_file(tmp_path: Path) -> None:
    s = spec(
        flags={"algo": "ppo", "env": "Hopper-v5", "agents": 4, "steps": 12345}, overrides={"epochs": "3"}
    )
    path = tmp_path / "spec.yaml"
    path.write_text(s.to_yaml())
    assert load_spec_file(path) == s


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"flags": {"algo": "a3c"}}, "unknown algorithm 'a3c'"),
        ({"flags": {"algo": "ppo", "env": "NoSuchEnv-v0"}}, "NoSuchEnv-v0"),
        ({"overrides": {"no_such_key": "1"}}, "unknown setting 'no_such_key'"),
        ({"overrides": {"epochs": "ten"}}, "ppo.epochs: expected an integer, got 'ten'"),
        ({"overrides": {"learning_rate": "fast"}}, "ppo.learning_rate: expected a number"),
        ({"flags": {"algo": "ppo", "agents": 0}}, "agents must be a positive integer, got 0"),
        ({"flags": {"algo": "ppo", "agents": -3}}, "agents must be a positive integer, got -3"),
        ({"flags": {"algo": "ppo", "steps": 0}}, "steps must be an integer from 1 to"),
        ({"overrides": {"epochs": "0"}}, "ppo.epochs must be an integer from 1 to 1,000"),
        ({"name": "Exp_1"}, "invalid experiment name 'Exp_1'"),
        ({"name": "-exp"}, "invalid experiment name '-exp'"),
        ({"name": "a" * 41}, "longer than 40 characters"),
        ({"flags": {}}, "no algorithm given"),
        ({"flags": {"algo": "ppo", "queue": "team-a"}}, "the local backend runs processes"),
    ],
)
def test_bad_input_names_the_problem(kwargs: dict, message: str) -> None:
    with pytest.raises(SpecError, match=None) as info:
        spec(**kwargs)
    assert message in str(info.value)


def test_malformed_yaml_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("agents: 2\nppo: [unclosed\n")
    with pytest.raises(SpecError, match=r"malformed YAML in config file .*bad.yaml.* line"):
        spec(config_file=bad)


def test_unknown_key_in_yaml_file(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("agnets: 2\n")
    with pytest.raises(SpecError, match="unknown key 'agnets'"):
        spec(config_file=cfg)


def test_set_needs_key_value() -> None:
    with pytest.raises(SpecError, match="expected KEY=VALUE"):
        parse_set(["epochs"])

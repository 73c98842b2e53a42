"""The environment is resolved once, at create: the spec file carries what the algorithms derive
from it (`resolved`), and loading the file, what every component does at start, neither resolves
the environment nor builds one. A hand-edited or corrupted file is one SpecError naming the problem."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import yaml

from surreal.algorithms.ppo import presets as ppo_presets
from surreal.runtime.envs import make as envs
from surreal.runtime.envs import ref as env_ref
from surreal.runtime.envs.ref import ResolvedEnv, extend_import_path
from surreal.runtime.es import presets as es_presets
from surreal.spec import SpecError, build_spec, load_spec_file

ENVS = Path(__file__).resolve().parents[1] / "envs"
extend_import_path([str(ENVS)])

# (algo, env, --set overrides): presets by id, by kind (images, Atari), a user's module with kwargs.
CASES = [
    ("ppo", "CartPole-v1", {}),
    ("ppo", "Pendulum-v1", {"env_kwargs.g": "9.81"}),
    ("ppo", "pixel_target:PixelTarget", {"env_kwargs.size": "20"}),
    ("ppo", "ALE/Pong-v5", {}),
    ("ppo", "line_world:LineWorld-v0", {"env_kwargs.size": "12"}),
    ("es", "CartPole-v1", {}),
]


def forbid_env_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every way of resolving or building an environment raises from here on."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"an environment was resolved or built: {args!r}")

    monkeypatch.setattr(gym, "make", refuse)
    for module, names in (
        (env_ref, ("resolve", "make_raw")),
        (envs, ("resolve", "resolve_env", "make_env", "make_raw")),
        (ppo_presets, ("resolve_env",)),
        (es_presets, ("resolve_env",)),
    ):
        for name in names:
            monkeypatch.setattr(module, name, refuse)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("algo", "env", "overrides"), CASES)
def test_the_spec_file_loads_as_it_is_without_making_an_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, algo: str, env: str, overrides: dict[str, str]
) -> None:
    spec = build_spec("r1", flags={"algo": algo, "env": env}, overrides=overrides)
    assert spec.resolved is not None and spec.resolved.ref == spec.env_ref
    path = write(tmp_path, spec.to_yaml())
    forbid_env_construction(monkeypatch)
    assert load_spec_file(path) == spec


def test_the_resolved_section_describes_the_env() -> None:
    atari = build_spec("r1", flags={"algo": "ppo", "env": "ALE/Pong-v5"}).resolved
    pend = build_spec("r1", flags={"algo": "ppo", "env": "Pendulum-v1"}).resolved
    assert atari is not None and atari.atari and atari.pixels and atari.discrete
    assert atari.image_shape == (4, 84, 84) and atari.obs_dim == 4 * 84 * 84
    assert pend is not None and not pend.atari and not pend.pixels and not pend.discrete
    assert (pend.obs_dim, pend.action_dim, pend.action_low, pend.action_high) == (3, 1, (-2.0,), (2.0,))
    assert pend.entry_point == "gymnasium.envs.classic_control.pendulum:PendulumEnv"


def test_a_component_takes_the_spaces_from_the_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = build_spec("r1", flags={"algo": "ppo", "env": "Pendulum-v1"}, overrides={"env_kwargs.g": "3.5"})
    assert spec.resolved is not None
    real = envs.env_spaces(envs.make_env(spec.env_ref, 0))
    monkeypatch.setattr(envs, "_SPACES", {})
    forbid_env_construction(monkeypatch)
    envs.use_resolved(spec.resolved)
    spaces = envs.spaces_for(spec.env_ref)
    assert spaces.obs_shape == real.obs_shape and spaces.discrete == real.discrete
    assert spaces.action_low is not None and real.action_low is not None
    assert spaces.action_low.dtype == np.float32
    np.testing.assert_array_equal(spaces.action_low, real.action_low)
    np.testing.assert_array_equal(spaces.action_high, real.action_high)  # type: ignore[arg-type]


COMPONENT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import gymnasium as gym
    from surreal import component
    from surreal.algorithms import api
    from surreal.runtime.envs import make as envs

    made = []
    real_make = gym.make
    gym.make = lambda *a, **k: made.append(a) or real_make(*a, **k)

    def role_main(self, role):
        def main(cfg, ctx):
            print(role, envs.spaces_for(ctx.env).obs_dim)  # what learners and evaluators ask first
            return 0
        return main

    api.OnPolicy.role_main = role_main
    component.run_component(sys.argv[2], Path(sys.argv[1]), 0)
    print("made", len(made))
    """
)


@pytest.mark.parametrize("resolved", [True, False], ids=["spec-file", "spec-without-resolved"])
def test_a_component_start_makes_no_env_unless_the_spec_has_no_resolved_section(
    tmp_path: Path, resolved: bool
) -> None:
    spec = build_spec("r1", flags={"algo": "ppo", "env": "line_world:LineWorld-v0"})
    data = spec.to_dict()
    if not resolved:  # older experiments, and what Helm's chart writes: resolved once, at start
        del data["resolved"]
    path = write(tmp_path, yaml.safe_dump(data, sort_keys=False))
    env = {"SURREAL_LEARNER_ADDR": "127.0.0.1:1", "SURREAL_TOKEN": "t", "SURREAL_IMPORT_PATH": str(ENVS)}
    result = subprocess.run(
        [sys.executable, "-c", COMPONENT, str(path), "learner"],
        capture_output=True, text=True, timeout=120, env={**os.environ, **env}, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["learner", "2", "made", "0" if resolved else "1"]


def test_a_spec_without_resolved_section_is_resolved_on_load(tmp_path: Path) -> None:
    spec = build_spec("r1", flags={"algo": "ppo", "env": "pixel_target:PixelTarget"})
    data = spec.to_dict()
    del data["resolved"]
    assert load_spec_file(write(tmp_path, yaml.safe_dump(data))) == spec


DELETE = object()  # the key is removed


def corrupt(resolved: dict[str, Any], key: str, value: Any) -> None:
    if value is DELETE:
        del resolved[key]
    else:
        resolved[key] = value


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("obs_dim", "four", "resolved.obs_dim: expected an integer, got 'four'"),
        ("obs_dim", [4], "resolved.obs_dim: expected an integer, got [4]"),
        ("obs_dim", 0, "resolved: obs_dim must be a positive integer, got 0"),
        ("discrete", "maybe", "resolved.discrete: expected true or false"),
        ("action_dim", DELETE, "resolved: action_dim is missing"),
        ("action_kind", "discrete", "resolved: unknown key 'action_kind'"),
        ("image_shape", [1, 2, 2], "resolved: image_shape [1, 2, 2] does not hold obs_dim 3 values"),
        ("image_shape", {"c": 1}, "resolved.image_shape: expected a list"),
        ("action_low", [-2.0, -2.0], "action_low and action_high must each hold action_dim (1) bounds"),
        ("action_high", None, "action_low and action_high must each hold action_dim (1) bounds"),
        ("action_high", [-3.0], "action_low must be <= action_high"),
        ("discrete", True, "action_low and action_high must be null for discrete actions"),
        ("env", "CartPole-v1", "resolved: found for environment 'CartPole-v1', but the spec names "
                               "'Pendulum-v1'"),
        ("env_kwargs", {"g": 1.0}, "found for environment 'Pendulum-v1' with env_kwargs {'g': 1.0}"),
        ("env_kwargs", "g", "resolved.env_kwargs: env_kwargs must be a mapping"),
        ("entry_point", ["x"], "resolved.entry_point: expected a string"),
    ],
)  # fmt: skip
def test_a_corrupted_resolved_section_is_one_spec_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str, value: Any, message: str
) -> None:
    data = build_spec("r1", flags={"algo": "ppo", "env": "Pendulum-v1"}).to_dict()
    corrupt(data["resolved"], key, value)
    path = write(tmp_path, yaml.safe_dump(data, sort_keys=False))
    forbid_env_construction(monkeypatch)
    with pytest.raises(SpecError) as err:
        load_spec_file(path)
    text = str(err.value)
    assert message in text and text.startswith(f"spec file {str(path)!r}: ") and "\n" not in text


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(resolved=[1, 2]), "resolved must be a mapping"),
        (lambda d: d.pop("name"), "name must be the experiment name, got None"),
        (lambda d: d.update(algo=["ppo"]), "algo must name the algorithm"),
        (lambda d: d.update(algo="a3c"), "unknown algorithm 'a3c'"),
        (lambda d: d.update(ppo=[1]), "ppo must be a mapping of ppo settings"),
        (lambda d: d.update(extra=1), "unknown key 'extra'"),
        (lambda d: d.update(agents={"n": 2}), "agents: expected an integer"),
        (lambda d: d["ppo"].update(epochs="ten"), "ppo.epochs: expected an integer, got 'ten'"),
        # An edit the resolved section refuses: ES does not train on images.
        (lambda d: d.update(algo="es", es={}, ppo=None), "unknown key 'ppo'"),
        (lambda d: [d.pop("ppo"), d.update(algo="es")], "ES does not support image observations"),
    ],
)
def test_a_hand_edited_spec_file_is_one_spec_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit: Any, message: str
) -> None:
    data = build_spec("r1", flags={"algo": "ppo", "env": "pixel_target:PixelTarget"}).to_dict()
    edit(data)
    path = write(tmp_path, yaml.safe_dump(data, sort_keys=False))
    forbid_env_construction(monkeypatch)
    with pytest.raises(SpecError) as err:
        load_spec_file(path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_config_files_name_and_resolved_are_what_create_finds_again(tmp_path: Path) -> None:
    """A spec a dry run printed is a valid --config: its `resolved` section is found again by
    resolving the environment (never trusted from the file), and NAME names the experiment."""
    config = tmp_path / "exp.yaml"
    config.write_text("name: other\nalgo: ppo\nenv: CartPole-v1\nresolved:\n  obs_dim: 400\n")
    spec = build_spec("r1", flags={}, config_file=config)
    assert spec.name == "r1" and spec.resolved is not None and spec.resolved.obs_dim == 4


def test_resolved_env_validate_accepts_what_resolve_env_finds() -> None:
    for env in ("CartPole-v1", "Pendulum-v1", "pixel_target:PixelTarget"):
        found = envs.resolve_env(env)
        assert isinstance(found, ResolvedEnv)
        found.validate()

"""A researcher's environment in the spec: env_kwargs from --set and YAML, what is refused at create
time (one line, nothing created: also whatever the user's code raises, SystemExit included), and what
the kube objects carry."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
import yaml
from cli_world import one_line, surreal
from test_cli_errors import SURREAL, created, run

from surreal.runtime.envs.ref import extend_import_path
from surreal.spec import SpecError, build_spec, load_spec_file

ENVS = Path(__file__).resolve().parents[1] / "envs"
extend_import_path([str(ENVS)])


def test_env_kwargs_from_set_are_yaml_values_over_the_files() -> None:
    spec = build_spec("c1", flags={"algo": "ppo", "env": "line_world:LineWorld-v0"},
                      overrides={"env_kwargs.size": "12", "env_kwargs.max_steps": "30"})  # fmt: skip
    # registered without a time limit: create gives it one (spec.DEFAULT_MAX_EPISODE_STEPS)
    assert spec.env_kwargs == {"size": 12, "max_steps": 30, "max_episode_steps": 10_000}
    assert spec.env_ref.kwargs == {"size": 12, "max_steps": 30, "max_episode_steps": 10_000}


def test_env_kwargs_round_trip_through_the_spec_file(tmp_path: Path) -> None:
    config = tmp_path / "exp.yaml"
    config.write_text("algo: ppo\nenv: pixel_target:PixelTarget\nenv_kwargs:\n  size: 20\n")
    spec = build_spec("c1", flags={}, config_file=config, overrides={"env_kwargs.episode_length": "8"})
    assert spec.env_kwargs == {"size": 20, "episode_length": 8, "max_episode_steps": 10_000}
    path = tmp_path / "spec.yaml"
    path.write_text(spec.to_yaml())
    assert load_spec_file(path) == spec


def test_specs_without_kwargs_keep_their_old_form() -> None:
    assert "env_kwargs" not in build_spec("c1", flags={"algo": "ppo"}).to_yaml()


@pytest.mark.parametrize(
    ("flags", "overrides", "message"),
    [
        ({"env": "line_world:LineWorld-v0"}, {"env_kwargs.sise": "3"}, "unexpected keyword argument 'sise'"),
        ({"env": "line_world:LineWorld-v0"}, {"env_kwargs.size": "1"}, "line_world:LineWorld-v0"),
        (
            {"env": "pixel_target:PixelTarget-v0"},
            {"norm_obs": "true"},
            "ppo.norm_obs must be false for image",
        ),
        ({"env": "pixel_target:PixelTarget-v0", "algo": "es"}, {}, "ES does not support image observations"),
        ({"env": "line_world:LineWorld-v0"}, {"env_kwargs.1x": "3"}, "'1x' is not a keyword argument name"),
    ],
)
def test_what_the_environment_refuses_is_a_spec_error(flags: dict, overrides: dict, message: str) -> None:
    with pytest.raises(SpecError) as err:
        build_spec("c1", flags={"algo": "ppo", **flags}, overrides=overrides)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ("no_such_mod:Env-v0", "cannot import module 'no_such_mod'"),
        ("line_world:Nope-v0", "neither registers an environment 'Nope-v0'"),
    ],
)
def test_the_cli_refuses_a_bad_module_in_one_line_and_creates_nothing(
    tmp_path: Path, env: str, message: str
) -> None:
    home = tmp_path / "home"
    result = run(home, "create", "c1", "--algo", "ppo", "--env", env, PYTHONPATH=str(ENVS))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert created(home) == []


def test_the_cli_finds_a_module_in_the_working_directory(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(SURREAL), "create", "c1", "--algo", "ppo", "--env", "line_world:LineWorld-v0", "--dry-run",
         "--set", "env_kwargs.size=7"],
        cwd=ENVS, capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin",
                                                                   "SURREAL_HOME": str(tmp_path)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout)["env_kwargs"] == {"size": 7, "max_episode_steps": 10_000}


def test_kube_objects_carry_the_env_and_its_kwargs_in_the_spec(tmp_path: Path) -> None:
    result = run(tmp_path, "create", "c1", "--algo", "ppo", "--env", "pixel_target:PixelTarget",
                 "--set", "env_kwargs.size=20", "--backend", "kube", "--dry-run", "-o", "yaml",
                 "--image", "example.org/lab/surreal-envs:1", PYTHONPATH=str(ENVS))  # fmt: skip
    assert result.returncode == 0, result.stderr
    objects = list(yaml.safe_load_all(result.stdout))
    config = next(o for o in objects if o["kind"] == "ConfigMap")
    spec = yaml.safe_load(next(iter(config["data"].values())))
    kwargs = {"size": 20, "max_episode_steps": 10_000}
    assert (spec["env"], spec["env_kwargs"]) == ("pixel_target:PixelTarget", kwargs)
    # Every component that imports the user's module runs the user's image: each role's Job.
    jobs = {o["metadata"]["labels"]["surreal.io/component"]: o for o in objects if o["kind"] == "Job"}
    assert set(jobs) == {"learner", "actor", "evaluator"}
    for role, job in jobs.items():
        images = [c["image"] for c in job["spec"]["template"]["spec"]["containers"]]
        assert images == ["example.org/lab/surreal-envs:1"], (role, images)


# tests/envs/hostile.py: environments that each break one thing surreal expects of one.
HOSTILE_ENVS = sorted(
    name
    for name, value in vars(importlib.import_module("hostile")).items()
    if isinstance(value, type) and issubclass(value, gym.Env) and value.__module__ == "hostile"
)


@pytest.mark.parametrize("algo", ["ppo", "es"])
@pytest.mark.parametrize("name", HOSTILE_ENVS)
def test_what_create_writes_of_any_environment_is_what_every_component_loads(
    tmp_path: Path, name: str, algo: str
) -> None:
    """The property: create refuses the environment in one line naming it, or the spec it writes
    (its `resolved` section: what the probe found) loads as every component loads it."""
    try:
        spec = build_spec("c1", flags={"algo": algo, "env": f"hostile:{name}"})
    except SpecError as exc:
        assert f"hostile:{name}" in str(exc) and "\n" not in str(exc), exc
        return
    path = tmp_path / "spec.yaml"
    path.write_text(spec.to_yaml())
    assert load_spec_file(path) == spec


@pytest.mark.parametrize(
    ("env", "line"),
    [
        (f"hostile:{name}", f"environment 'hostile:{name}': ")
        for name in HOSTILE_ENVS
        if name not in ("Plain", "Float64Observations", "Flaky")
    ]
    + [
        ("sys:exit", "environment 'sys:exit': cannot be made: SystemExit"),
        (
            "exits_at_import:Env",
            "environment 'exits_at_import:Env': cannot import module 'exits_at_import': SystemExit: 3",
        ),
        (
            "parses_argv_at_import:Env",
            "environment 'parses_argv_at_import:Env': cannot import module "
            "'parses_argv_at_import': SystemExit: 2",
        ),
    ],  # fmt: skip
)
def test_the_users_code_failing_at_create_is_one_line_of_theirs_exit_2_and_nothing_created(
    tmp_path: Path,
    surreal_home: Path,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    env: str,
    line: str,
) -> None:
    """In-process, as the installed command runs it; fd-level output: what reaches the terminal.
    argparse prints its usage before it exits: that noise is the module's, dropped at create."""
    (tmp_path / "exits_at_import.py").write_text("import sys\nprint('loading')\nsys.exit(3)\n")
    (tmp_path / "parses_argv_at_import.py").write_text(
        "import argparse\nargparse.ArgumentParser().parse_args()\n"
    )
    extend_import_path([str(tmp_path)])
    argv = ["create", "c1", "--algo", "ppo", "--env", env, "--steps", "1000"]
    monkeypatch.setattr(sys, "argv", ["surreal", *argv])  # what the module's argparse reads, as installed
    code, out, err = surreal(capfd, *argv)
    assert (code, out) == (2, ""), (code, out, err)
    assert one_line(err).startswith(f"surreal: error: {line}"), err
    assert not surreal_home.exists() or not any(surreal_home.rglob("*"))


def test_a_ctrl_c_in_the_users_module_interrupts_create(
    tmp_path: Path, surreal_home: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "interrupted_at_import.py").write_text("raise KeyboardInterrupt\n")
    extend_import_path([str(tmp_path)])
    code, _, err = surreal(
        capfd, "create", "c1", "--algo", "ppo", "--env", "interrupted_at_import:E", "--dry-run"
    )
    assert (code, one_line(err)) == (130, "surreal: error: interrupted")

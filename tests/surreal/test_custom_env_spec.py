"""A researcher's environment in the spec: env_kwargs from --set and YAML, what is refused at create
time (one line, nothing created), and what the kube objects carry."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from test_cli_errors import SURREAL, created, run

from surreal.algorithms.common.env_ref import extend_import_path
from surreal.spec import SpecError, build_spec, load_spec_file

ENVS = Path(__file__).resolve().parents[1] / "envs"
extend_import_path([str(ENVS)])


def test_env_kwargs_from_set_are_yaml_values_over_the_files() -> None:
    spec = build_spec("c1", flags={"algo": "ppo", "env": "line_world:LineWorld-v0"},
                      overrides={"env_kwargs.size": "12", "env_kwargs.max_steps": "30"})  # fmt: skip
    assert spec.env_kwargs == {"size": 12, "max_steps": 30}
    assert spec.env_ref.kwargs == {"size": 12, "max_steps": 30}


def test_env_kwargs_round_trip_through_the_spec_file(tmp_path: Path) -> None:
    config = tmp_path / "exp.yaml"
    config.write_text("algo: ppo\nenv: pixel_target:PixelTarget\nenv_kwargs:\n  size: 20\n")
    spec = build_spec("c1", flags={}, config_file=config, overrides={"env_kwargs.episode_length": "8"})
    assert spec.env_kwargs == {"size": 20, "episode_length": 8}
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
    assert yaml.safe_load(result.stdout)["env_kwargs"] == {"size": 7}


def test_kube_objects_carry_the_env_and_its_kwargs_in_the_spec(tmp_path: Path) -> None:
    result = run(tmp_path, "create", "c1", "--algo", "ppo", "--env", "pixel_target:PixelTarget",
                 "--set", "env_kwargs.size=20", "--backend", "kube", "--dry-run", "-o", "yaml",
                 "--image", "example.org/lab/surreal-envs:1", PYTHONPATH=str(ENVS))  # fmt: skip
    assert result.returncode == 0, result.stderr
    objects = list(yaml.safe_load_all(result.stdout))
    config = next(o for o in objects if o["kind"] == "ConfigMap")
    spec = yaml.safe_load(next(iter(config["data"].values())))
    assert (spec["env"], spec["env_kwargs"]) == ("pixel_target:PixelTarget", {"size": 20})
    # Every component that imports the user's module runs the user's image: each role's Job.
    jobs = {o["metadata"]["labels"]["surreal.io/component"]: o for o in objects if o["kind"] == "Job"}
    assert set(jobs) == {"learner", "actor", "evaluator"}
    for role, job in jobs.items():
        images = [c["image"] for c in job["spec"]["template"]["spec"]["containers"]]
        assert images == ["example.org/lab/surreal-envs:1"], (role, images)

"""What a hostile trial of the CLI found (issue 37), each family proven where it went wrong: a config
that expands, a --config that is no file, settings without upper bounds, the CLI's own output as
its input. Each refusal is one line, exit 2, and nothing is created."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml
from cli_world import make_experiment, one_line, snapshot, surreal

from surreal.spec import MAX_YAML_VALUES, SpecError, build_spec, parse_yaml, short

LAUGHS = "\n".join(
    ["env_kwargs:", "  a: &a [x, x, x, x, x, x, x, x, x]"]
    + [f"  {b}: &{b} [{', '.join([f'*{a}'] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi", strict=True)]
)


@pytest.fixture
def top(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SURREAL_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_an_alias_bomb_is_refused_before_anything_walks_it() -> None:
    """9**9 (387 million) items named in 600 bytes: refused in milliseconds, where formatting the
    value for the error line hung past 30 s and 1.8 GB."""
    started = time.perf_counter()
    with pytest.raises(SpecError, match=f"expands to more than {MAX_YAML_VALUES:,} values"):
        parse_yaml(LAUGHS, "config file 'bomb.yaml'")
    assert time.perf_counter() - started < 5.0  # a hang's guard, not a timing: it takes ~10 ms
    with pytest.raises(SpecError, match="expands to more than"):
        parse_yaml("env_kwargs: &s\n  me: *s\n", "a mapping that holds itself")


def test_error_lines_never_format_a_whole_value() -> None:
    assert len(short(list(range(10**6)))) <= 80
    assert len(short("x" * 10**7)) <= 80
    assert "digits" in short(10**5000)  # past the digits Python prints (sys.int_info)
    nested: list[object] = []
    nested.append(nested)
    assert len(short(nested)) <= 80


def test_a_big_env_kwargs_is_one_short_line(top: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (top / "big.yaml").write_text("env_kwargs:\n  big: [" + ",".join(["1"] * 90_000) + "]\n")
    code, _, err = surreal(capsys, "create", "b", "--algo", "ppo", "--config", "big.yaml", "--dry-run")
    assert code == 2 and len(one_line(err)) <= 1100, err[:200]


def test_a_fifo_config_is_refused_unread(top: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.mkfifo(top / "fifo")
    code, _, err = surreal(capsys, "create", "f", "--algo", "ppo", "--config", "fifo", "--dry-run")
    assert code == 2 and "config file 'fifo' is not a regular file" in one_line(err)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "eval_episodes=100000000"], "ppo.eval_episodes must be an integer from 1 to 1,000"),
        (["--set", "hidden_sizes=60000,60000"], "need 107.3 GiB, over the 1 GiB a learner rank has"),
        (["--algo", "es", "--set", "handout_ratio=1e300"], "es.handout_ratio must be >= 1 and <= 100"),
        (["--agents", "20000"], "would step 10,000 environments, over the 4,096"),
        (["--set", "env_kwargs.render_mode=human"], "env_kwargs.render_mode 'human': components run"),
        (["--backend", "kube", "--image", "Registry/UPPER:Tag"], "invalid image 'Registry/UPPER:Tag'"),
    ],
)
def test_settings_have_upper_bounds(
    top: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    """Each of these passed --dry-run and failed (or hung) the run."""
    argv = ["create", "s", *(["--algo", "ppo"] if "--algo" not in args else []), *args, "--dry-run"]
    code, _, err = surreal(capsys, *argv)
    assert code == 2 and message in one_line(err), err
    assert not (top / "home").exists()


@pytest.mark.parametrize("backend", ["local", "kube"])
@pytest.mark.parametrize("output", ["yaml", "json"])
def test_a_dry_runs_output_is_a_valid_config(
    top: Path, capsys: pytest.CaptureFixture[str], backend: str, output: str
) -> None:
    """`create ... --dry-run -o yaml > exp.yaml && create --config exp.yaml` gives the same objects
    (kube's: the same but for the token a create makes anew)."""
    flags = [
        "--algo",
        "ppo",
        "--env",
        "Pendulum-v1",
        "--agents",
        "4",
        "--set",
        "epochs=3",
        "--backend",
        backend,
    ]
    code, first, err = surreal(capsys, "create", "rt", *flags, "--dry-run", "-o", output)
    assert code == 0, err
    (top / f"exp.{output}").write_text(first)
    code, again, err = surreal(capsys, "create", "rt", "--config", f"exp.{output}", "--dry-run", "-o", output)
    assert code == 0, err

    def objects(text: str) -> list[object]:
        docs = list(yaml.safe_load_all(text))
        items = docs[0]["items"] if output == "json" and backend == "kube" else docs
        for item in items:
            if isinstance(item, dict) and item.get("kind") == "Secret":
                item.pop("stringData", None), item.pop("data", None)
        return items

    assert objects(again) == objects(first)


def test_an_empty_algorithm_section_is_no_setting(top: Path) -> None:
    (top / "e.yaml").write_text("algo: ppo\nppo:\n")
    assert build_spec("e", flags={}, config_file=top / "e.yaml").config.epochs >= 1


def test_a_dry_run_refuses_a_taken_name_as_create_does(top: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_experiment(top / "home", "taken")
    before = snapshot(top)
    code, _, err = surreal(capsys, "create", "taken", "--algo", "ppo", "--dry-run")
    assert code == 2 and "experiment 'taken' already exists" in one_line(err)
    assert snapshot(top) == before

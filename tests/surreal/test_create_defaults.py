"""What `surreal create` tells and takes before anything runs (issue 49): the algorithms its help
lists, each algorithm's default environment, SAC's own reason for one learner, the docs page an
unknown setting points to, sizes written as 1e6, and the dry run of an algorithm of one's own read
back as its `--config`."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_world import one_line, snapshot, surreal

from surreal.algorithms.registry import ALGORITHMS

ROOT = Path(__file__).resolve().parents[2]
OWN = "examples.a2c:A2C"


@pytest.fixture
def own_algorithm(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """examples/a2c.py importable as create imports it: from where the shell stands."""
    monkeypatch.chdir(ROOT)
    monkeypatch.syspath_prepend(str(ROOT))
    yield OWN
    sys.modules.pop("examples.a2c", None)


def test_a_dry_run_of_an_own_algorithm_is_its_config_as_it_stands(
    own_algorithm: str, surreal_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, printed, err = surreal(capsys, "create", "a2c", "--algo", own_algorithm, "--set", "ent_coef=0.01",
                                 "--dry-run", "-o", "yaml")  # fmt: skip
    assert code == 0, err
    assert f"{own_algorithm}:\n" in printed and "ent_coef: 0.01" in printed
    config = tmp_path / "a2c.yaml"
    config.write_text(printed)
    code, again, err = surreal(capsys, "create", "a2c", "--config", str(config), "--dry-run", "-o", "yaml")
    assert (code, err, again) == (0, "", printed)
    # Another algorithm's section is still refused, named whole.
    config.write_text(printed.replace(f"{own_algorithm}:\n", "ppo:\n", 1))
    code, out, err = surreal(capsys, "create", "a2c", "--config", str(config), "--dry-run")
    assert code == 2 and out == ""
    assert "config file section 'ppo' does not match algorithm 'examples.a2c:A2C'" in one_line(err)


@pytest.mark.parametrize(
    ("algo", "reason"),
    [("sac", "one learner samples every replay shard"), ("es", "its results are a few numbers per episode")],
)
def test_learners_are_refused_with_the_algorithms_own_reason(
    algo: str, reason: str, surreal_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(surreal_home.parent)
    code, out, err = surreal(capsys, "create", "x", "--algo", algo, "--learners", "2")
    assert code == 2 and out == ""
    assert f"learners 2: {algo} trains with one learner ({reason}" in one_line(err)
    assert snapshot(surreal_home.parent) == before


@pytest.mark.parametrize(
    ("algo", "env"), [("sac", "Pendulum-v1"), ("ppo", "CartPole-v1"), ("es", "CartPole-v1")]
)
def test_create_without_env_takes_the_algorithms_default(
    algo: str, env: str, surreal_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = surreal(capsys, "create", "x", "--algo", algo, "--dry-run")
    assert code == 0, err
    assert f"\nenv: {env}\n" in out
    assert ALGORITHMS[algo].default_env == env


def test_create_help_lists_the_registry_and_each_default_env(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = surreal(capsys, "create", "--help")
    text = " ".join(out.split())
    assert code == 0
    assert f"Algorithm: {', '.join(ALGORITHMS)}, or your own as MODULE:NAME" in text
    assert "(default: CartPole-v1; sac: Pendulum-v1; td3: Pendulum-v1)" in text


@pytest.mark.parametrize("algo", [*ALGORITHMS, OWN])
def test_an_unknown_setting_points_to_a_page_that_exists(
    algo: str, own_algorithm: str, surreal_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = surreal(capsys, "create", "x", "--algo", algo, "--set", "no_such_setting=1", "--dry-run")
    line = one_line(err)
    assert code == 2 and "unknown setting 'no_such_setting'" in line
    pages = re.findall(r"docs/algorithms/[\w.:-]+\.md", line)
    assert pages and all((ROOT / page).is_file() for page in pages), line


@pytest.mark.parametrize(("written", "held"), [("1e6", 1_000_000), ("2.5e5", 250_000), ("1_000", 1000)])
def test_sizes_take_scientific_notation_when_it_is_a_whole_number(
    written: str, held: int, surreal_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = surreal(
        capsys, "create", "x", "--algo", "sac", "--set", f"buffer_size={written}", "--dry-run"
    )
    assert code == 0, err
    assert f"  buffer_size: {held}\n" in out


@pytest.mark.parametrize("written", ["1.5", "1e-3", "1e300", "nan", "inf", "1e"])
def test_a_size_that_is_no_whole_number_is_refused(
    written: str, surreal_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = surreal(
        capsys, "create", "x", "--algo", "sac", "--set", f"buffer_size={written}", "--dry-run"
    )
    assert code == 2 and out == ""
    assert f"sac.buffer_size: expected an integer, got '{written}'" in one_line(err)

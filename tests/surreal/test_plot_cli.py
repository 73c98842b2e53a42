"""`surreal plot` through click's runner: a figure of several local experiments, and bad input as
one line on stderr, a non-zero exit and no file."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image
import pytest
from click.testing import CliRunner, Result

from surreal.cli.commands import cli
from surreal.runtime.tb import Scalars

RUNS = {
    "a": ([(100, 10.0), (200, 20.0)], [(200, 25.0)]),
    "b": ([(100, 5.0), (200, 7.5), (300, 9.0)], []),  # no evaluation yet
}


@pytest.fixture
def home(surreal_home: Path) -> Path:
    for name, (train, evals) in RUNS.items():
        scalars = Scalars(surreal_home / "experiments" / name / "tb")
        for step, value in train:
            scalars.add("progress", {"episode_return": value}, step)
        for step, value in evals:
            scalars.add("eval", {"mean_return": value}, step)
        scalars.close()
    (surreal_home / "experiments" / "fresh" / "logs").mkdir(parents=True)  # created, learner not started
    return surreal_home


def plot(*args: str) -> Result:
    return CliRunner().invoke(cli, ["plot", *args])


def test_two_experiments_on_one_figure(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "cmp.png"
    result = plot("a", "b", "-o", str(out), "--size", "900x300")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"a, b: {out}"
    assert matplotlib.image.imread(out).shape[:2] == (300, 900)


def test_one_axis_has_its_own_default_size(home: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = plot("a", "--x", "steps")
    assert result.exit_code == 0, result.output
    assert matplotlib.image.imread(tmp_path / "curve.png").shape[:2] == (500, 800)


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["nope"], 1, "no experiment named 'nope'"),
        (["a", "nope"], 1, "no experiment named 'nope'"),
        (["fresh"], 1, "experiment 'fresh' has no TensorBoard events yet"),
        (["a", "-o", "{tmp}/missing/c.png"], 2, "folder '{tmp}/missing' does not exist"),
        (["a", "-o", "{tmp}/c.gif"], 2, "use a .png, .svg or .pdf file name"),
        (["a", "--size", "big"], 2, "--size must be WIDTHxHEIGHT"),
        (["a", "--size", "10x10"], 2, "100 to 10000 pixels each way"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(home: Path, tmp_path: Path, args, code, message) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    args = [a.replace("{tmp}", str(out_dir)) for a in args]
    if "-o" not in args:
        args += ["-o", str(out_dir / "c.png")]
    result = plot(*args)
    assert result.exit_code == code
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("surreal: error: ") and message.replace("{tmp}", str(out_dir)) in line
    assert list(out_dir.iterdir()) == []

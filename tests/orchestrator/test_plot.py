"""`surreal plot`'s library: curves read from event files the learner's own writer makes, restarts
continued, several experiments drawn on one figure whose lines are the runs' data."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Sequence
from pathlib import Path

import matplotlib.image
import pytest
from tensorboard.backend.event_processing import event_accumulator as ea

from surreal.orchestrator import plot
from surreal.orchestrator.plot import Curve, PlotError, RunCurves
from surreal.runtime.tb import Scalars

# Values a float32 holds exactly: TensorBoard stores scalars as float32.
TRAIN_A = [(100, 10.0), (200, 12.5), (300, 20.0), (400, 31.25)]
EVAL_A = [(200, 15.0), (400, 40.0)]
TRAIN_B = [(150, 9.0), (300, 11.0), (450, 14.5)]
EVAL_B = [(450, 22.0)]


def write_life(tb_dir: Path, train: Sequence[tuple[int, float]], evals: Sequence[tuple[int, float]]) -> None:
    """What one learner process writes: progress and eval scalars keyed by env steps."""
    scalars = Scalars(tb_dir)
    for step, value in train:
        scalars.add("progress", {"episode_return": value, "episodes": 3.0}, step)
    for step, value in evals:
        scalars.add("eval", {"mean_return": value, "mean_length": 5.0}, step)
    scalars.close()


def experiment(home: Path, name: str, *lives: tuple[list, list]) -> Path:
    exp_dir = home / "experiments" / name
    for train, evals in lives:
        write_life(exp_dir / "tb", train, evals)
    return exp_dir


def pairs(c: Curve) -> list[tuple[int, float]]:
    return list(zip(c.steps, c.values, strict=True))


def test_a_restart_replaces_what_came_after_its_step_in_every_curve() -> None:
    def life(start: float, first: int, points: list[tuple[int, float]]) -> plot.Life:
        events = [ea.ScalarEvent(start + i, s, v) for i, (s, v) in enumerate(points)]
        return plot.Life(start, first, {"t": events})

    first = life(0.0, 1, [(1, 1.0), (2, 2.0), (3, 3.0), (2, 20.0), (4, 4.0)])  # 2 again: 20 wins
    assert [(p.step, p.value) for p in plot.continued([first], "t")] == [(1, 1.0), (2, 20.0), (4, 4.0)]
    # Restarted at step 3 (another tag's first point): this tag's point at 4 goes though it has
    # none at 3 or later yet.
    second = life(100.0, 3, [(5, 5.0)])
    assert [(p.step, p.value) for p in plot.continued([first, second], "t")] == [
        (1, 1.0),
        (2, 20.0),
        (5, 5.0),
    ]
    assert plot.continued([], "t") == [] and plot.continued([first], "other") == []


def test_curves_are_the_scalars_the_learner_wrote(tmp_path: Path) -> None:
    exp_dir = experiment(tmp_path, "a", (TRAIN_A, EVAL_A))
    run = plot.read_local(tmp_path, "a")
    assert run.name == "a" and pairs(run.train) == TRAIN_A and pairs(run.eval) == EVAL_A
    assert all(0 <= s < 60 for s in run.train.seconds + run.eval.seconds)  # since the first event
    assert list(run.train.seconds) == sorted(run.train.seconds)
    assert plot.read_events(exp_dir / "tb", "a") == run


def test_a_restarted_learner_continues_the_curves(tmp_path: Path) -> None:
    # The second life restarts from a checkpoint at step 250: its points replace the first life's
    # from there on (steps 300 and 400, and the eval at 400), and the curves go on.
    experiment(tmp_path, "a", (TRAIN_A, EVAL_A), ([(250, 18.0), (500, 50.0)], [(500, 60.0)]))
    run = plot.read_local(tmp_path, "a")
    assert pairs(run.train) == [(100, 10.0), (200, 12.5), (250, 18.0), (500, 50.0)]
    assert pairs(run.eval) == [(200, 15.0), (500, 60.0)]
    assert run.train.seconds[-1] > run.train.seconds[1]


def test_missing_experiments_and_missing_events_are_plot_errors(tmp_path: Path) -> None:
    with pytest.raises(PlotError, match="no experiment named 'nope'"):
        plot.read_local(tmp_path, "nope")
    (tmp_path / "experiments" / "fresh" / "logs").mkdir(parents=True)
    with pytest.raises(PlotError, match="experiment 'fresh' has no TensorBoard events yet"):
        plot.read_local(tmp_path, "fresh")
    scalars = Scalars(tmp_path / "experiments" / "early" / "tb")  # updates logged, no episode done
    scalars.add("train", {"loss": 1.0}, 10)
    scalars.close()
    with pytest.raises(PlotError, match="experiment 'early' has no returns yet"):
        plot.read_local(tmp_path, "early")


def test_two_experiments_on_one_figure(tmp_path: Path) -> None:
    experiment(tmp_path, "a", (TRAIN_A, EVAL_A))
    experiment(tmp_path, "b", (TRAIN_B, EVAL_B))
    runs = [plot.read_local(tmp_path, n) for n in ("a", "b")]
    out = tmp_path / "curve.png"
    fig = plot.draw(runs, out, size=(1000, 400))
    assert matplotlib.image.imread(out).shape[:2] == (400, 1000)  # rows, columns
    by_steps, by_time = fig.axes
    assert by_steps.get_xlabel() == "env steps" and by_time.get_xlabel() == "wall time (s)"
    assert [t.get_text() for t in by_steps.get_legend().get_texts()] == [
        "a train",
        "a eval",
        "b train",
        "b eval",
    ]
    lines = {line.get_label(): line for line in by_steps.get_lines()}
    for name, train, evals in (("a", TRAIN_A, EVAL_A), ("b", TRAIN_B, EVAL_B)):
        for kind, written in (("train", train), ("eval", evals)):
            xs, ys = lines[f"{name} {kind}"].get_data()
            assert list(zip(xs, ys, strict=True)) == written
    time_lines = {line.get_label(): line for line in by_time.get_lines()}
    assert list(time_lines["b eval"].get_xdata()) == list(runs[1].eval.seconds)
    assert lines["a train"].get_color() == lines["a eval"].get_color() != lines["b train"].get_color()


def test_one_axis_default_size_and_other_formats(tmp_path: Path) -> None:
    run = RunCurves("a", Curve((1, 2), (1.0, 2.0), (0.0, 7200.0)), Curve())
    fig = plot.draw([run], tmp_path / "t.png", x="time")
    assert matplotlib.image.imread(tmp_path / "t.png").shape[:2] == plot.PANEL_SIZE[::-1]
    [ax] = fig.axes
    assert ax.get_xlabel() == "wall time (h)" and list(ax.get_lines()[0].get_xdata()) == [0.0, 2.0]
    assert [line.get_label() for line in ax.get_lines()] == ["a train"]  # no eval yet: no line
    plot.draw([run], tmp_path / "t.svg", x="steps")
    assert (tmp_path / "t.svg").read_text().lstrip().startswith("<?xml")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("curve.jpg", "use a .png, .svg or .pdf file name"),
        ("curve", "use a .png, .svg or .pdf file name"),
        ("missing/curve.png", "folder '.*missing' does not exist"),
        ("folder.png", "it is a folder"),
    ],
)
def test_bad_outputs_write_nothing(tmp_path: Path, name: str, message: str) -> None:
    (tmp_path / "folder.png").mkdir()
    before = sorted(tmp_path.rglob("*"))
    run = RunCurves("a", Curve((1,), (1.0,), (0.0,)), Curve())
    with pytest.raises(PlotError, match=message):
        plot.draw([run], tmp_path / name)
    assert sorted(tmp_path.rglob("*")) == before


def test_bad_axes_and_sizes_are_refused() -> None:
    with pytest.raises(PlotError, match="--x must be one of both, steps, time"):
        plot.figure_size("wall", None)
    with pytest.raises(PlotError, match="100 to 10000 pixels each way, got 50x400"):
        plot.figure_size("both", (50, 400))
    assert plot.figure_size("both", None) == plot.BOTH_SIZE


def test_an_archive_of_the_tb_folder_reads_like_the_folder(tmp_path: Path) -> None:
    exp_dir = experiment(tmp_path, "a", (TRAIN_A, EVAL_A))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(exp_dir / "tb", arcname="tb")
        hostile = tarfile.TarInfo("../../events.out.tfevents.escape")
        tar.addfile(hostile, io.BytesIO(b""))
    run = plot.read_archive(buffer.getvalue(), "a")
    assert run == plot.read_local(tmp_path, "a")
    assert not (tmp_path.parent / "events.out.tfevents.escape").exists()
    with pytest.raises(PlotError, match="unreadable archive"):
        plot.read_archive(b"not a tar", "a")

"""`surreal plot`: experiments' train and eval return curves, from the TensorBoard events their
learner wrote, drawn with matplotlib (Agg, no display).

Reading and drawing are separate steps with typed curves between them, so a test compares the drawn
lines with what the runs wrote, and a Kubernetes experiment's events (a tar archive copied out of
its learner pod) go through the same reader as a local experiment's `tb/` folder.
"""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from tensorboard.backend.event_processing import event_accumulator as ea

from surreal.orchestrator.home import ExperimentError, existing_dir

# What every learner core writes (runtime/onpolicy/learner.py and runtime/es/master.py
# `_log_update`; runtime/progress.py `record_eval`), keyed by env steps.
TRAIN_TAG = "progress/episode_return"  # mean return of the latest training episodes
EVAL_TAG = "eval/mean_return"  # mean return of the evaluator's deterministic episodes
EVENT_PREFIX = "events.out.tfevents."
FORMATS = ("png", "svg", "pdf")  # what matplotlib writes without extra packages
X_AXES = ("both", "steps", "time")
DPI = 100
# Default size in pixels: one panel, or steps and wall time side by side.
PANEL_SIZE = (800, 500)
BOTH_SIZE = (1400, 500)


class PlotError(RuntimeError):
    """Input `surreal plot` cannot draw; str(error) is the one line to show."""


@dataclass(frozen=True)
class Curve:
    """One scalar of one experiment in step order, one point per env step."""

    steps: tuple[int, ...] = ()
    values: tuple[float, ...] = ()
    seconds: tuple[float, ...] = ()  # wall time since the experiment's first event

    def __len__(self) -> int:
        return len(self.steps)


@dataclass(frozen=True)
class RunCurves:
    """An experiment's return curves, as `draw` plots them."""

    name: str
    train: Curve
    eval: Curve


@dataclass(frozen=True)
class Life:
    """What one learner process wrote (one event file): the return tags' points in the order
    written, and where it started."""

    started: float  # wall time of its first event, seconds since the epoch
    first_step: int | None  # the lowest step of any scalar it logged; None: none yet
    points: dict[str, list[ea.ScalarEvent]]  # its (wall_time, step, value) by tag


def continued(lives: Sequence[Life], tag: str) -> list[ea.ScalarEvent]:
    """One tag's curve across learner lives, in the order they started. A restarted learner goes
    back to its checkpoint's step and logs again from there: every point an earlier life wrote at
    or after that step is replaced (as TensorBoard's purge does), and within a life a point
    replaces the earlier ones at its step or later."""
    out: list[ea.ScalarEvent] = []
    for life in lives:
        if life.first_step is not None:
            out = [p for p in out if p.step < life.first_step]
        for point in life.points.get(tag, []):
            while out and out[-1].step >= point.step:
                out.pop()
            out.append(point)
    return out


def curve(points: Sequence[ea.ScalarEvent], start: float) -> Curve:
    return Curve(
        steps=tuple(p.step for p in points),
        values=tuple(p.value for p in points),
        seconds=tuple(p.wall_time - start for p in points),
    )


def _load(path: Path) -> Life | None:
    """One event file; None when it has no events yet."""
    acc = ea.EventAccumulator(str(path), size_guidance={ea.SCALARS: 0})  # 0: every event, no sampling
    acc.Reload()
    try:
        started = acc.FirstEventTimestamp()
    except ValueError:
        return None
    scalars = {tag: acc.Scalars(tag) for tag in acc.Tags()["scalars"]}
    first_step = min((events[0].step for events in scalars.values() if events), default=None)
    return Life(started, first_step, {tag: scalars.get(tag, []) for tag in (TRAIN_TAG, EVAL_TAG)})


def read_events(tb_dir: Path, name: str) -> RunCurves:
    """Curves from the event files in `tb_dir`: one file per learner start, taken in the order
    they were started, so a restarted learner continues the curves of the one before."""
    paths = sorted(tb_dir.glob(f"{EVENT_PREFIX}*")) if tb_dir.is_dir() else []
    lives = sorted((life for life in map(_load, paths) if life is not None), key=lambda life: life.started)
    if not lives:
        raise PlotError(f"experiment {name!r} has no TensorBoard events yet (in {tb_dir})")
    train, evals = continued(lives, TRAIN_TAG), continued(lives, EVAL_TAG)
    if not train and not evals:
        raise PlotError(f"experiment {name!r} has no returns yet (no {TRAIN_TAG} or {EVAL_TAG} events)")
    return RunCurves(name, curve(train, lives[0].started), curve(evals, lives[0].started))


def read_local(home: Path, name: str) -> RunCurves:
    """The curves of local experiment `name` in `home`."""
    try:
        exp_dir = existing_dir(home, name)
    except ExperimentError as exc:
        raise PlotError(str(exc)) from None
    return read_events(exp_dir / "tb", name)


def read_archive(archive: bytes, name: str) -> RunCurves:
    """The curves in a tar archive of a `tb/` folder (`KubeClient.tb_archive`). Only the event
    files' contents are taken, flat, so no name in the archive can write outside a scratch folder."""
    with tempfile.TemporaryDirectory(prefix="surreal-plot-") as scratch:
        try:
            with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
                for member in tar:
                    base = os.path.basename(member.name)
                    if member.isfile() and base.startswith(EVENT_PREFIX):
                        source = tar.extractfile(member)
                        (Path(scratch) / base).write_bytes(source.read() if source else b"")
        except tarfile.TarError as exc:
            raise PlotError(f"experiment {name!r}: unreadable archive of its events ({exc})") from None
        return read_events(Path(scratch), name)


def output_format(path: Path) -> str:
    """The file format of `path`, checked before anything is read, so bad input writes nothing."""
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise PlotError(f"cannot write {str(path)!r}: use a .png, .svg or .pdf file name")
    if path.is_dir():
        raise PlotError(f"cannot write {str(path)!r}: it is a folder")
    if not path.parent.is_dir():
        raise PlotError(f"cannot write {str(path)!r}: folder {str(path.parent)!r} does not exist")
    return fmt


def figure_size(x: str, size: tuple[int, int] | None) -> tuple[int, int]:
    """The figure's (width, height) in pixels: `size`, or the default for the axes of `x`."""
    if x not in X_AXES:
        raise PlotError(f"--x must be one of {', '.join(X_AXES)}, got {x!r}")
    width, height = size or (BOTH_SIZE if x == "both" else PANEL_SIZE)
    if not (100 <= width <= 10_000 and 100 <= height <= 10_000):
        raise PlotError(f"the figure must be 100 to 10000 pixels each way, got {width}x{height}")
    return width, height


def draw(
    runs: Sequence[RunCurves], path: Path, *, x: str = "both", size: tuple[int, int] | None = None
) -> Figure:
    """Draw `runs` on one figure and write it to `path` (replaced whole, never half-written);
    returns the figure so that callers and tests can read back the lines drawn. `x`: "steps",
    "time" (wall time) or "both" (two panels); `size`: width and height in pixels."""
    fmt = output_format(path)
    width, height = figure_size(x, size)
    axes_x = ("steps", "time") if x == "both" else (x,)
    fig = Figure(figsize=(width / DPI, height / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    for ax, kind in zip(fig.subplots(1, len(axes_x), squeeze=False)[0], axes_x, strict=True):
        _panel(ax, runs, kind)
    fig.axes[0].legend(loc="best", fontsize="small")
    fig.suptitle(f"Return: {', '.join(r.name for r in runs)}")
    _save(fig, path, fmt)
    return fig


def _panel(ax: Axes, runs: Sequence[RunCurves], x: str) -> None:
    """One panel: each run in its own colour, train as a line, eval as a dashed line with markers."""
    longest = max((c.seconds[-1] for r in runs for c in (r.train, r.eval) if c), default=0.0)
    divisor, unit = _time_unit(longest)
    for i, run in enumerate(runs):
        for kind, data, style in (("train", run.train, "-"), ("eval", run.eval, "--o")):
            if not data:
                continue
            xs: Sequence[float] = data.steps if x == "steps" else [s / divisor for s in data.seconds]
            ax.plot(xs, data.values, style, color=f"C{i % 10}", label=f"{run.name} {kind}", markersize=3)
    ax.set_xlabel("env steps" if x == "steps" else f"wall time ({unit})")
    ax.set_ylabel("return")
    ax.set_title("by env steps" if x == "steps" else "by wall time")
    ax.grid(True, alpha=0.3)


def _time_unit(max_seconds: float) -> tuple[float, str]:
    """Seconds, minutes or hours, whichever keeps the axis' numbers short."""
    if max_seconds < 120:
        return 1.0, "s"
    if max_seconds < 2 * 3600:
        return 60.0, "min"
    return 3600.0, "h"


def _save(fig: Figure, path: Path, fmt: str) -> None:
    # A temporary file beside `path`, renamed over it: a failed write leaves no partial figure.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fig.savefig(tmp, format=fmt, dpi=DPI)
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise PlotError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None
        raise

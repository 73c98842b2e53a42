"""`surreal plot NAME [NAME...]`: experiments' return curves on one figure, to compare runs."""

from __future__ import annotations

import re
from pathlib import Path

import click

from surreal.cli.common import NAME, backend_options, fail, launcher_for
from surreal.orchestrator.launcher import LauncherError


@click.command()
@click.argument("names", metavar="NAME...", nargs=-1, required=True, type=NAME)
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    default=Path("curve.png"),
    show_default=True,
    help="The figure: a .png, .svg or .pdf file (replaced if it exists).",
)
@click.option(
    "--x",
    "x_axis",
    type=click.Choice(["both", "steps", "time"]),
    default="both",
    show_default=True,
    help="Horizontal axis: env steps, wall time, or both side by side.",
)
@click.option("--size", metavar="WxH",
              help="Figure size in pixels [default: 1400x500; 800x500 for one axis].")  # fmt: skip
@backend_options
def plot(names: tuple[str, ...], output: Path, x_axis: str, size: str | None, backend: str, namespace: str,
         context: str | None) -> None:  # fmt: skip
    """Draw experiments' train and eval return curves on one figure, to compare runs.

    The curves come from each experiment's TensorBoard events (kube: read in its learner pod)."""
    from surreal.orchestrator import plot as plots  # matplotlib: only this command loads it

    try:
        plots.output_format(output)
        pixels = plots.figure_size(x_axis, _pixels(size))
    except plots.PlotError as exc:
        fail(str(exc), code=2)
    unique = list(dict.fromkeys(names))
    try:
        launcher = launcher_for(backend, namespace, context)
        runs = [launcher.events(name) for name in unique]
        plots.draw(runs, output, x=x_axis, size=pixels)
    except (plots.PlotError, LauncherError) as exc:
        fail(str(exc))
    click.echo(f"{', '.join(unique)}: {output}")


def _pixels(size: str | None) -> tuple[int, int] | None:
    """--size WxH as (width, height); None: the default for the axes drawn."""
    from surreal.orchestrator.plot import PlotError

    if size is None:
        return None
    match = re.fullmatch(r"(\d+)[xX](\d+)", size.strip())
    if match is None:
        raise PlotError(f"--size must be WIDTHxHEIGHT in pixels (e.g. 1400x500), got {size!r}")
    return int(match.group(1)), int(match.group(2))

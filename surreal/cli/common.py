"""Helpers shared by the `surreal` commands: error lines, tables, the progress line, backends."""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from surreal.orchestrator.backends import open_launcher
from surreal.orchestrator.home import home_dir
from surreal.orchestrator.launcher import Launcher, LauncherError
from surreal.spec import SpecError, validate_name

T = TypeVar("T")


MAX_ERROR = 1000  # characters of an error line: whatever it quotes, it stays one readable line


def fail(message: str, code: int = 1) -> NoReturn:
    line = " ".join(message.split())
    click.echo(
        f"surreal: error: {line if len(line) <= MAX_ERROR else line[: MAX_ERROR - 3] + '...'}", err=True
    )
    sys.exit(code)


class ExperimentName(click.ParamType):
    """A NAME argument, checked by the rule `create` applies before any command touches the disk or
    a cluster (so `..`, `a/b` or an absolute path never become a path)."""

    name = "name"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            validate_name(value)
        except SpecError as exc:
            raise click.UsageError(str(exc)) from None
        return str(value)


NAME = ExperimentName()


def backend_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--backend/--namespace/--context for the commands that name experiments."""
    command = click.option("--context", help="kubeconfig context (kube backend).")(command)
    command = click.option("--namespace", default="default", show_default=True,
                           help="Namespace (kube backend).")(command)  # fmt: skip
    backend = click.option(
        "--backend",
        type=click.Choice(["local", "containers", "kube"]),
        default=lambda: os.environ.get("SURREAL_BACKEND", "local"),
        help="Where the experiment runs [default: local, or $SURREAL_BACKEND]; local and containers "
        "experiments are both found in $SURREAL_HOME.",
    )
    return backend(command)


def launcher_for(backend: str, namespace: str = "default", context: str | None = None) -> Launcher:
    """The one launcher a command works with."""
    try:
        return open_launcher(backend, home=home_dir(), namespace=namespace, context=context)
    except LauncherError as exc:
        fail(str(exc))


def call(fn: Callable[..., T], *args: Any, code: int = 1, **kwargs: Any) -> T:
    """Run a launcher operation; its typed error becomes one line and exit `code` (2 for a usage
    error, whatever `code`)."""
    try:
        return fn(*args, **kwargs)
    except LauncherError as exc:
        fail(str(exc), code=max(code, exc.exit_code))


class ProgressLine:
    """A foreground `create`'s watcher: redraws one line on a terminal; prints a line every 10 s
    when stderr is not a terminal."""

    def __init__(self, total_steps: int) -> None:
        self.total = total_steps
        self.tty = sys.stderr.isatty()
        self.last_print = 0.0

    def started(self, line: str) -> None:
        click.echo(line, err=True)

    def tick(self, metrics: dict[str, Any]) -> None:
        now = time.monotonic()
        if not self.tty and now - self.last_print < 10.0:
            return
        self.last_print = now
        steps = metrics.get("env_steps") or 0
        line = f"steps {steps:,}/{self.total:,} ({100 * steps / self.total:.0f}%)  {summary(metrics)}"
        if self.tty:
            click.echo(f"\r\033[K{line}", nl=False, err=True)
        else:
            click.echo(line, err=True)


def fmt(value: Any, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def summary(m: dict[str, Any]) -> str:
    return (
        f"{fmt(m.get('steps_per_second'), ',.0f')} steps/s  "
        f"train return {fmt(m.get('train_return'))}  eval return {evaluation(m)}  "
        f"version {fmt(m.get('policy_version'), 'd')}  {fmt(m.get('elapsed_seconds'), '.0f')} s"
    )


def evaluation(m: dict[str, Any]) -> str:
    """The last evaluation as a measurement: its mean ± its standard error (over N episodes)."""
    if m.get("eval_return") is None or m.get("eval_stderr") is None:
        return fmt(m.get("eval_return"))
    se = m["eval_stderr"]
    digits = min(4, max(1, 1 - math.floor(math.log10(se)))) if se > 0 else 1  # the error's 2 significant
    return f"{m['eval_return']:.{digits}f} ± {se:.{digits}f} ({m.get('eval_episodes')} episodes)"


def rejections(st: dict[str, Any]) -> list[str]:
    """What the learner refused, one line per kind that is not all zeros: fragments (PPO) or
    results (ES) by reason, updates skipped, and calls its server refused."""
    lines = []
    for key, what in (("rejected_fragments", "fragments"), ("results_rejected", "results"),
                      ("wire_rejections", "calls")):  # fmt: skip
        counts = {k: v for k, v in (st.get(key) or {}).items() if v}
        if counts:
            lines.append(f"{what}: " + ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items())))
    if st.get("skipped_updates"):
        lines.append(f"updates skipped (non-finite): {st['skipped_updates']:,}")
    return lines


def replay_lines(st: dict[str, Any]) -> list[str]:
    """An off-policy run's replay (docs/algorithms/sac.md): its size and rates, the ratio held
    beside its target, and what the shards refused or lost (none for an algorithm without replay,
    or before the learner has heard from a shard)."""
    r = st.get("replay") or {}
    if not r:
        return []
    lines = [
        f"size {fmt(r.get('size'), ',d')} rows; ratio held {fmt(r.get('replay_ratio'))} "
        f"(target {fmt(r.get('target_ratio'), 'g')})",
        f"inserts {fmt(r.get('inserts_per_second'), ',.0f')}/s, "
        f"samples {fmt(r.get('samples_per_second'), ',.0f')}/s; "
        f"refused {fmt(r.get('refused_fragments'), ',d')} fragments; lost {fmt(r.get('lost'), ',d')} rows, "
        f"restored {fmt(r.get('restored'), ',d')}",
    ]
    down = [str(i) for i, shard in enumerate(r.get("shards") or []) if not shard.get("reachable", True)]
    if down:
        lines.append(f"shard{'s' if len(down) > 1 else ''} {', '.join(down)} not reachable")
    return lines


def table(headers: list[str], rows: list[list[Any]]) -> None:
    cells = [headers, *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for row in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())

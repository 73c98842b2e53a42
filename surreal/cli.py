"""The `surreal` command. Commands only parse, call the orchestrator, and print."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click

from surreal.orchestrator import experiments as exps
from surreal.orchestrator import local
from surreal.spec import SpecError, build_spec, parse_set


def home_dir() -> Path:
    return Path(os.environ.get("SURREAL_HOME") or Path.home() / ".surreal")


def fail(message: str, code: int = 1) -> NoReturn:
    click.echo(f"surreal: error: {message}", err=True)
    sys.exit(code)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="surreal")
def cli() -> None:
    """Distributed deep reinforcement learning, from a laptop to a Kubernetes cluster."""


@cli.command()
@click.argument("name")
@click.option("--algo", help="Algorithm: ppo.")
@click.option("--env", "env_id", help="Gymnasium environment id (default CartPole-v1).")
@click.option("--agents", type=int, help="Logical agents (default 2).")
@click.option("--steps", type=int, help="Environment steps to train for.")
@click.option("--seed", type=int, help="Base random seed.")
@click.option("--backend", help="local (default) or kube.")
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="YAML spec file.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a spec key.")
@click.option("--detach", is_flag=True, help="Return at once; the experiment runs on.")
@click.option("--dry-run", is_flag=True, help="Validate and print the spec; start nothing.")
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), help="Dry-run output format.")
def create(
    name: str,
    algo: str | None,
    env_id: str | None,
    agents: int | None,
    steps: int | None,
    seed: int | None,
    backend: str | None,
    config_file: Path | None,
    sets: tuple[str, ...],
    detach: bool,
    dry_run: bool,
    output: str | None,
) -> None:
    """Create experiment NAME and run it (in the foreground unless --detach)."""
    flags = {"algo": algo, "env": env_id, "agents": agents, "steps": steps, "seed": seed,
             "backend": backend}  # fmt: skip
    try:
        spec = build_spec(name, flags=flags, config_file=config_file, overrides=parse_set(sets))
    except SpecError as exc:
        fail(str(exc), code=2)
    if dry_run:
        if output == "json":
            click.echo(json.dumps(spec.to_dict(), indent=2))
        else:
            click.echo(spec.to_yaml(), nl=False)
        return
    if spec.backend != "local":
        fail(f"backend {spec.backend!r} is not available in this version (use --backend local)")
    home = home_dir()
    try:
        exp_dir, program = exps.prepare(spec, home)
    except exps.ExperimentError as exc:
        fail(str(exc), code=2)
    if detach:
        pid = exps.run_detached(exp_dir)
        click.echo(f"experiment {name!r} started (supervisor pid {pid}); `surreal status {name}`")
        return
    click.echo(
        f"experiment {name!r}: {spec.algo} on {spec.env}, {spec.agents} agents in "
        f"{sum(c.role == 'actor' for c in program.components)} actor processes, "
        f"{spec.steps:,} steps; files in {exp_dir}",
        err=True,
    )
    code = exps.run_foreground(exp_dir, program, on_tick=ProgressLine(exp_dir, spec.steps))
    final = exps.status(exp_dir)
    click.echo("", err=True)
    click.echo(f"{name}: {final['phase']} — {summary(final)}", err=True)
    sys.exit(code)


class ProgressLine:
    """Redraws one line on a terminal; prints a line every 10 s when stderr is not a terminal."""

    def __init__(self, exp_dir: Path, total_steps: int) -> None:
        self.exp_dir = exp_dir
        self.total = total_steps
        self.tty = sys.stderr.isatty()
        self.last_print = 0.0

    def __call__(self) -> None:
        now = time.monotonic()
        if not self.tty and now - self.last_print < 10.0:
            return
        self.last_print = now
        metrics = exps.read_metrics(self.exp_dir)
        steps = metrics.get("env_steps") or 0
        line = f"steps {steps:,}/{self.total:,} ({100 * steps / self.total:.0f}%)  {summary(metrics)}"
        if self.tty:
            click.echo(f"\r\033[K{line}", nl=False, err=True)
        else:
            click.echo(line, err=True)


def _fmt(value: Any, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def summary(m: dict[str, Any]) -> str:
    return (
        f"{_fmt(m.get('steps_per_second'), ',.0f')} steps/s  "
        f"train return {_fmt(m.get('train_return'))}  eval return {_fmt(m.get('eval_return'))}  "
        f"version {_fmt(m.get('policy_version'), 'd')}  {_fmt(m.get('elapsed_seconds'), '.0f')} s"
    )


@cli.command(name="list")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table")
def list_cmd(output: str) -> None:
    """List experiments."""
    rows = exps.list_all(home_dir())
    if output == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    table(
        ["NAME", "ALGO", "ENV", "AGENTS", "PHASE", "STEPS", "EVAL RETURN"],
        [
            [
                r["name"],
                r["algo"],
                r["env"],
                r["agents"],
                r["phase"],
                _fmt(r["env_steps"], ",d"),
                _fmt(r["eval_return"]),
            ]
            for r in rows
        ],  # fmt: skip
    )


def table(headers: list[str], rows: list[list[Any]]) -> None:
    cells = [headers, *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for row in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _existing(name: str) -> Path:
    try:
        return exps.existing_dir(home_dir(), name)
    except exps.ExperimentError as exc:
        fail(str(exc))


@cli.command(name="status")
@click.argument("name")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table")
def status_cmd(name: str, output: str) -> None:
    """Show an experiment's phase, progress and components."""
    st = exps.status(_existing(name))
    if output == "json":
        click.echo(json.dumps(st, indent=2))
        return
    for key in ("name", "algo", "env", "backend", "phase"):
        click.echo(f"{key + ':':<18}{st[key]}")
    for key in exps.METRIC_FIELDS:
        click.echo(f"{key + ':':<18}{_fmt(st[key], ',') if isinstance(st[key], int) else _fmt(st[key])}")
    click.echo("")
    table(["COMPONENT", "ROLE", "STATE", "RESTARTS"],
          [[c["name"], c["role"], c["state"], c["restarts"]] for c in st["components"]])  # fmt: skip


@cli.command()
@click.argument("name")
@click.argument("component", required=False, default="learner")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines.")
@click.option("-n", "--lines", type=int, default=100, help="Lines from the end to start with.")
def logs(name: str, component: str, follow: bool, lines: int) -> None:
    """Print the log of a component (default: learner)."""
    exp_dir = _existing(name)
    try:
        for line in local.tail_log(exp_dir, component, follow=follow, lines=lines):
            click.echo(line)
    except FileNotFoundError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        pass


@cli.command()
@click.argument("name")
def delete(name: str) -> None:
    """Stop an experiment and remove its files."""
    try:
        exps.delete(home_dir(), name)
    except exps.ExperimentError as exc:
        fail(str(exc))
    click.echo(f"experiment {name!r} deleted")


@cli.command()
@click.argument("name")
@click.option("--port", type=int, default=6006)
def tensorboard(name: str, port: int) -> None:
    """Serve the experiment's TensorBoard scalars on http://127.0.0.1:PORT."""
    tb_dir = _existing(name) / "tb"
    click.echo(f"TensorBoard for {name!r}: http://127.0.0.1:{port}/", err=True)
    os.execv(sys.executable, [sys.executable, "-m", "tensorboard.main", "--logdir", str(tb_dir),
                              "--host", "127.0.0.1", "--port", str(port)])  # fmt: skip


@cli.command(hidden=True)
@click.argument("role")
@click.option("--spec", "spec_path", required=True, type=click.Path(path_type=Path, exists=True))
@click.option("--index", type=int, default=0)
def component(role: str, spec_path: Path, index: int) -> None:
    """Run one component (what every launcher starts)."""
    from surreal.component import run_component

    sys.exit(run_component(role, spec_path, index))


@cli.command(hidden=True)
@click.argument("exp_dir", type=click.Path(path_type=Path, exists=True, file_okay=False))
def supervise(exp_dir: Path) -> None:
    """Run a detached experiment's supervisor."""
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    sys.exit(local.run_supervisor(exp_dir))


def main(argv: list[str] | None = None) -> None:
    """Entry point: click errors become one line on stderr with exit code 2."""
    run: Callable[..., Any] = cli.main
    try:
        run(args=argv, prog_name="surreal", standalone_mode=False)
    except click.exceptions.Abort:
        fail("aborted", code=130)
    except click.ClickException as exc:
        fail(exc.format_message(), code=exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)

"""The `surreal` command. Commands only parse, call the orchestrator, and print."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from surreal.algorithms.common.env_ref import extend_import_path
from surreal.cli.common import (
    ProgressLine,
    fail,
    fmt,
    home_dir,
    kube_call,
    kube_launcher,
    kube_options,
    rejections,
    summary,
    table,
)
from surreal.cli.plot import plot
from surreal.cli.provision import provision
from surreal.orchestrator import experiments as exps
from surreal.orchestrator import local
from surreal.spec import SpecError, build_spec, parse_set


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="surreal")
def cli() -> None:
    """Distributed deep reinforcement learning, from a laptop to a Kubernetes cluster."""


@cli.command()
@click.argument("name")
@click.option("--algo", help="Algorithm: ppo or es.")
@click.option("--env", "env_id", help="Environment id (default CartPole-v1), MODULE:ENV_ID or MODULE:CLASS.")
@click.option("--agents", type=int, help="Logical agents (default 2).")
@click.option("--steps", type=int, help="Environment steps to train for.")
@click.option("--seed", type=int, help="Base random seed.")
@click.option("--backend", help="local (default) or kube.")
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="YAML spec file.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a spec key.")
@click.option("--detach", is_flag=True, help="Return at once; the experiment runs on.")
@click.option("--dry-run", is_flag=True, help="Validate and print the spec (kube: the objects).")
@click.option("-o", "--output", type=click.Choice(["yaml", "json", "helm-values"]),
              help="Dry-run output format (helm-values: values for helm/surreal; kube only).")  # fmt: skip
@click.option("--namespace", help="Kubernetes namespace (default: default).")
@click.option("--image", help="Container image (kube; default surreal:local on kind/minikube).")
@click.option("--gpu", type=int, help="GPUs for the learner.")
@click.option("--context", help="kubeconfig context (kube backend).")
@click.option(
    "--pools",
    "pools_file",
    type=click.Path(path_type=Path),
    help="Node pools YAML (kube): the learner goes to the GPU pool with --gpu, the rest to CPU.",
)
@click.option("--provider", type=click.Choice(["kind", "minikube", "gke", "eks", "aks"]),
              help="Cluster provider (kube): its default pools when --pools is not given.")  # fmt: skip
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
    namespace: str | None,
    image: str | None,
    gpu: int | None,
    context: str | None,
    pools_file: Path | None,
    provider: str | None,
) -> None:
    """Create experiment NAME and run it (in the foreground unless --detach)."""
    flags = {"algo": algo, "env": env_id, "agents": agents, "steps": steps, "seed": seed,
             "backend": backend, "namespace": namespace, "image": image, "gpu": gpu}  # fmt: skip
    # A user's environment module imports from where this shell stands, as components will.
    extend_import_path(exps.user_import_path())
    try:
        spec = build_spec(name, flags=flags, config_file=config_file, overrides=parse_set(sets))
    except SpecError as exc:
        fail(str(exc), code=2)
    if spec.backend == "kube":
        placement = kube_placement(spec, pools_file, provider)
        create_kube(spec, dry_run=dry_run, output=output or "yaml", context=context, placement=placement)
        return
    if pools_file or provider:
        fail("--pools and --provider place pods on a cluster: they need --backend kube", code=2)
    if output == "helm-values":
        fail("-o helm-values needs --backend kube", code=2)
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


def kube_placement(spec: Any, pools_file: Path | None, provider: str | None) -> dict[str, Any] | None:
    """Placement per role from a pools file or the provider's default pools; None: unpinned."""
    from surreal import provisioner as prov
    from surreal.orchestrator import kube_output

    if pools_file is None and provider is None:
        return None
    try:
        pools = prov.load_pools(pools_file) if pools_file else prov.default_pools(provider or "")
        return kube_output.placements(spec, pools, provider)
    except ValueError as exc:
        fail(str(exc), code=2)


def create_kube(
    spec: Any, *, dry_run: bool, output: str, context: str | None, placement: dict[str, Any] | None
) -> None:
    from surreal.orchestrator import kube_output, kube_render

    # SURREAL_TOKEN fixes the token (reproducible manifests); otherwise each run makes a new one.
    token = os.environ.get("SURREAL_TOKEN") or kube_render.new_token()
    try:
        if dry_run:
            click.echo(kube_output.dry_run(spec, output, token=token, placement=placement), nl=False)
            return
        kube_render.check_capacity(spec)
    except kube_render.RenderError as exc:
        fail(str(exc), code=2)
    launcher = kube_launcher(context)
    kube_call(launcher.create, spec, token=token, placement=placement)
    click.echo(
        f"experiment {spec.name!r} created in namespace {spec.namespace!r} "
        f"({spec.agents} agents); watch it: kubectl get pods -n {spec.namespace} "
        f"-l surreal.io/experiment={spec.name}, or `surreal status {spec.name} --backend kube`"
    )


@cli.command(name="list")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table")
@kube_options
def list_cmd(output: str, backend: str, namespace: str, context: str | None) -> None:
    """List experiments."""
    if backend == "kube":
        kube_rows = kube_call(kube_launcher(context).list_experiments, namespace)
        if output == "json":
            click.echo(json.dumps(kube_rows, indent=2))
            return
        table(["NAME", "ALGO", "ENV", "AGENTS", "PHASE", "PODS", "MANAGED BY"],
              [[r["name"], r["algo"], r["env"], r["agents"], r["phase"], r["pods"], r["managed_by"]]
               for r in kube_rows])  # fmt: skip
        return
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
                fmt(r["env_steps"], ",d"),
                fmt(r["eval_return"]),
            ]
            for r in rows
        ],  # fmt: skip
    )


def _existing(name: str) -> Path:
    try:
        return exps.existing_dir(home_dir(), name)
    except exps.ExperimentError as exc:
        fail(str(exc))


@cli.command(name="status")
@click.argument("name")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table")
@kube_options
def status_cmd(name: str, output: str, backend: str, namespace: str, context: str | None) -> None:
    """Show an experiment's phase, progress and components."""
    if backend == "kube":
        st = kube_call(kube_launcher(context).status, name, namespace)
    else:
        st = exps.status(_existing(name))
    if output == "json":
        click.echo(json.dumps(st, indent=2))
        return
    for key in ("name", "algo", "env", "backend", "phase", "learner_status"):
        if key in st:
            click.echo(f"{key + ':':<18}{st[key]}")
    for key in exps.METRIC_FIELDS:
        click.echo(f"{key + ':':<18}{fmt(st[key], ',') if isinstance(st[key], int) else fmt(st[key])}")
    for i, line in enumerate(rejections(st)):
        click.echo(f"{'rejected:' if i == 0 else '':<18}{line}")
    click.echo("")
    table(["COMPONENT", "ROLE", "STATE", "RESTARTS"],
          [[c["name"], c["role"], c["state"], c["restarts"]] for c in st["components"]])  # fmt: skip


@cli.command()
@click.argument("name")
@click.argument("component", required=False, default="learner")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines.")
@click.option("-n", "--lines", type=int, default=100, help="Lines from the end to start with.")
@click.option("--previous", is_flag=True, help="kube: the crashed container before its restart.")
@kube_options
def logs(name: str, component: str, follow: bool, lines: int, previous: bool, backend: str,
         namespace: str, context: str | None) -> None:  # fmt: skip
    """Print the log of a component (default: learner; kube: also actor-N or a pod name)."""
    if backend == "kube":
        from surreal.orchestrator.kube import KubeError

        launcher = kube_launcher(context)
        try:
            for line in launcher.logs(name, namespace, component, follow=follow, previous=previous,
                                      tail=lines):  # fmt: skip
                click.echo(line)
        except KubeError as exc:
            fail(str(exc))
        except KeyboardInterrupt:
            pass
        return
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
@click.option("--agents", type=int, required=True, help="Logical agents from now on.")
@click.option("--namespace", default="default", show_default=True)
@click.option("--context", help="kubeconfig context.")
def scale(name: str, agents: int, namespace: str, context: str | None) -> None:
    """Change the number of actor pods of a Kubernetes experiment."""
    replicas = kube_call(kube_launcher(context).scale, name, namespace, agents)
    click.echo(f"experiment {name!r}: {agents} agents in {replicas} actor pods")


@cli.command()
@click.argument("name")
@kube_options
def delete(name: str, backend: str, namespace: str, context: str | None) -> None:
    """Stop an experiment and remove its files (kube: all its objects)."""
    if backend == "kube":
        kube_call(kube_launcher(context).delete, name, namespace)
        click.echo(f"experiment {name!r} deleted from namespace {namespace!r}")
        return
    try:
        exps.delete(home_dir(), name)
    except exps.ExperimentError as exc:
        fail(str(exc))
    click.echo(f"experiment {name!r} deleted")


@cli.command()
@click.argument("name")
@click.option("--port", type=int, default=6006)
@kube_options
def tensorboard(name: str, port: int, backend: str, namespace: str, context: str | None) -> None:
    """Serve the experiment's TensorBoard scalars on http://127.0.0.1:PORT."""
    if backend == "kube":
        forward = kube_call(kube_launcher(context).tensorboard, name, namespace, port)
        click.echo(f"TensorBoard for {name!r}: http://{forward.address}/ (Ctrl-C to stop)", err=True)
        try:
            forward.wait()
        except KeyboardInterrupt:
            pass
        finally:
            forward.close()
        return
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


cli.add_command(provision)
cli.add_command(plot)


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

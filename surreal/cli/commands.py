"""The `surreal` commands. Each only parses, calls the orchestrator, and prints."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import click

from surreal.algorithms.registry import ALGORITHMS
from surreal.cli.common import (
    NAME,
    ProgressLine,
    backend_options,
    call,
    fail,
    fmt,
    launcher_for,
    rejections,
    replay_lines,
    summary,
    table,
)
from surreal.cli.plot import plot
from surreal.cli.provision import provision
from surreal.cli.record import record
from surreal.orchestrator import home, sizing
from surreal.orchestrator.launcher import LauncherError, Placement
from surreal.orchestrator.local import processes as local
from surreal.orchestrator.status import METRIC_FIELDS
from surreal.runtime.envs.ref import extend_import_path
from surreal.spec import SpecError, build_spec, notes, parse_set


def default_envs() -> str:
    """Each algorithm's environment when --env is not given, as help says it: "CartPole-v1; sac:
    Pendulum-v1" (the most common one, then the others by algorithm)."""
    envs = [a.default_env for a in ALGORITHMS.values()]
    common = max(envs, key=envs.count)
    others = [f"{name}: {a.default_env}" for name, a in ALGORITHMS.items() if a.default_env != common]
    return "; ".join([common, *others])


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="surreal")
def cli() -> None:
    """Distributed deep reinforcement learning, from a laptop to a Kubernetes cluster."""


@cli.command()
@click.argument("name", type=NAME)
@click.option("--algo", help=f"Algorithm: {', '.join(ALGORITHMS)}, or your own as MODULE:NAME "
              "(docs/algorithms/writing.md).")  # fmt: skip
@click.option("--env", "env_id", help=f"Environment id (default: {default_envs()}), MODULE:ENV_ID or "
              "MODULE:CLASS.")  # fmt: skip
@click.option("--agents", type=int, help="Logical agents (default 2).")
@click.option("--learners", type=int, help="Learner ranks averaging gradients (default 1; PPO).")
@click.option(
    "--learner-pods",
    type=int,
    help="Pods the learner ranks spread over (containers, kube; default 1: one pod).",
)
@click.option("--replay-shards", type=int, help="Replay shards, each a process or pod (default 1; SAC).")
@click.option("--agents-per-pod", type=int, help="Agents in one actor pod (containers, kube; default 1; "
              "benchmarks/calibration.py: what an actor CPU makes, what the learner uses).")  # fmt: skip
@click.option("--steps", type=int, help="Environment steps to train for.")
@click.option("--seed", type=int, help="Base random seed.")
@click.option("--backend", help="local (default), containers or kube.")
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="YAML spec file.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a spec key.")
@click.option("--detach", is_flag=True, help="Return at once; the experiment runs on.")
@click.option(
    "--dry-run", is_flag=True, help="Validate and print what would run (the spec; kube: the objects)."
)
@click.option("-o", "--output", type=click.Choice(["yaml", "json", "helm-values"]),
              help="Dry-run output format (helm-values: values for helm/surreal; kube only).")  # fmt: skip
@click.option("--no-calibrate", is_flag=True, envvar=sizing.SKIP_VAR,
              help=f"Measure nothing at create: one agent an actor worker unless --agents-per-pod "
                   f"(${sizing.SKIP_VAR}=1 too).")  # fmt: skip
@click.option("--namespace", help="Kubernetes namespace (default: default).")
@click.option("--image", help="Container image (containers, kube; default surreal:local).")
@click.option("--gpu", type=int, help="GPUs for the learner.")
@click.option(
    "--queue",
    help="Kueue LocalQueue that admits the whole experiment as one unit (kube: "
    "its Jobs are one JobSet; needs JobSet and Kueue on the cluster).",
)
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
    learners: int | None,
    learner_pods: int | None,
    replay_shards: int | None,
    agents_per_pod: int | None,
    steps: int | None,
    seed: int | None,
    backend: str | None,
    config_file: Path | None,
    sets: tuple[str, ...],
    detach: bool,
    dry_run: bool,
    output: str | None,
    no_calibrate: bool,
    namespace: str | None,
    image: str | None,
    gpu: int | None,
    queue: str | None,
    context: str | None,
    pools_file: Path | None,
    provider: str | None,
) -> None:
    """Create experiment NAME and run it (in the foreground unless --detach; kube: on the cluster)."""
    flags = {"algo": algo, "env": env_id, "agents": agents, "learners": learners,
             "learner_pods": learner_pods, "replay_shards": replay_shards, "agents_per_pod": agents_per_pod,
             "steps": steps,
             "seed": seed, "backend": backend, "namespace": namespace, "image": image, "gpu": gpu,
             "queue": queue}  # fmt: skip
    # A user's environment module imports from where this shell stands, as components will.
    extend_import_path(home.user_import_path())
    # What the user's code prints (their module at import, their hooks) goes to stderr: stdout is
    # create's own, a dry run's YAML or JSON that a pipe reads.
    theirs = contextlib.redirect_stdout(sys.stderr)
    try:
        with theirs:
            spec = build_spec(name, flags=flags, config_file=config_file, overrides=parse_set(sets))
    except SpecError as exc:
        fail(str(exc), code=2)
    # How the agents are packed into workers, from what this machine measures (sizing.py).
    with theirs:
        spec = sizing.size(spec, None if no_calibrate else sizing.measurer(spec),
                           lambda line: click.echo(f"surreal: sizing: {line}", err=True))  # fmt: skip
    if spec.sizing and "calibration_seconds" in spec.sizing:  # what it measured, and chose
        took = spec.sizing["calibration_seconds"]
        click.echo(f"surreal: sizing: {spec.sizing['why']} (measured in {took:g} s)", err=True)
    for line in notes(spec):
        click.echo(f"surreal: note: {line}", err=True)
    launcher = launcher_for(spec.backend, spec.namespace, context)
    where = Placement(pools_file, provider)
    if dry_run:
        with theirs:
            rendered = call(launcher.dry_run, spec, output or "yaml", where, code=2)
        click.echo(rendered, nl=False)
        return
    if output:
        fail("-o/--output goes with --dry-run", code=2)
    launched = call(launcher.create, spec, detach=detach, placement=where, watch=ProgressLine(spec.steps))
    if launched.message:
        click.echo(launched.message)
    if launched.phase is not None:
        final = call(launcher.status, name)
        click.echo("", err=True)
        click.echo(f"{name}: {final['phase']} — {summary(final)}", err=True)
        if final.get("problem") and final["phase"] != "Succeeded":
            click.echo(f"{name}: {final['problem']}", err=True)
    sys.exit(launched.exit_code)


@cli.command(name="list")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table")
@backend_options
def list_cmd(output: str, backend: str, namespace: str, context: str | None) -> None:
    """List experiments (local and containers ones live in $SURREAL_HOME; kube: the namespace's)."""
    rows = call(launcher_for(backend, namespace, context).list_experiments)
    if output == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    pods = any("pods" in r for r in rows)  # kube rows: pods and who manages the release
    table(["NAME", "BACKEND", "ALGO", "ENV", "AGENTS", "PHASE", "STEPS", "EVAL RETURN",
           *(["PODS", "MANAGED BY"] if pods else [])],
          [[r["name"], r.get("backend", backend), r["algo"] or "-", r["env"] or "-", fmt(r["agents"], "d"),
            r["phase"], fmt(r.get("env_steps"), ",d"), fmt(r.get("eval_return")),
            *([r.get("pods", "-"), r.get("managed_by") or "-"] if pods else [])] for r in rows])  # fmt: skip
    for r in rows:  # what is wrong with a row that could not be read, one line each
        if r.get("problem"):
            click.echo(f"{r['name']}: {r['problem']}")


@cli.command(name="status")
@click.argument("name", type=NAME)
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table")
@backend_options
def status_cmd(name: str, output: str, backend: str, namespace: str, context: str | None) -> None:
    """Show an experiment's phase, progress and components."""
    st = call(launcher_for(backend, namespace, context).status, name)
    if output == "json":
        click.echo(json.dumps(st, indent=2))
        return
    for key in ("name", "algo", "env", "backend", "agents", "phase", "learner_status"):
        if key in st:
            click.echo(f"{key + ':':<18}{st[key]}")
    for key in METRIC_FIELDS:
        click.echo(f"{key + ':':<18}{fmt(st[key], ',') if isinstance(st[key], int) else fmt(st[key])}")
    if st.get("checkpoint_version") is not None:
        age = fmt(st.get("checkpoint_age_seconds"), ".0f")
        click.echo(f"{'checkpoint:':<18}version {st['checkpoint_version']}, {age} s old")
    ranks = st.get("learners") or []
    pods = any(rank.get("pod") for rank in ranks)  # --learner-pods: each rank's pod too
    for rank in ranks:  # learner ranks: what each took in
        where = f" in learner pod {rank['pod']}" if pods else ""
        click.echo(f"{'learner rank ' + str(rank['rank']) + ':':<18}{fmt(rank['env_steps'], ',d')} env steps "
                   f"from {rank['connected_actors']} actor streams{where}")  # fmt: skip
    for i, line in enumerate(replay_lines(st)):
        click.echo(f"{'replay:' if i == 0 else '':<18}{line}")
    if st.get("sizing"):  # how create packed the agents, and why
        click.echo(f"{'sizing:':<18}{st['sizing']}")
    if st.get("balance"):  # the learner's update share, and what it says of the packing
        click.echo(f"{'balance:':<18}{st['balance']}")
    if st.get("group_restarts"):
        click.echo(f"{'group restarts:':<18}{st['group_restarts']} (the learner ranks, from a checkpoint)")
    for key in ("queued", "admission", "waiting_for", "problem"):
        if st.get(key):
            click.echo(f"{key + ':':<18}{st[key]}")
    for i, line in enumerate(rejections(st)):
        click.echo(f"{'rejected:' if i == 0 else '':<18}{line}")
    if st.get("jobs"):
        click.echo("")
        keys = ("name", "role", "state", "completions", "failed")
        table([k.upper() if k != "name" else "JOB" for k in keys], [[j[k] for k in keys] for j in st["jobs"]])
    click.echo("")
    table(["COMPONENT", "ROLE", "STATE", "RESTARTS", "DETAIL"],
          [[c["name"], c["role"], c["state"], c["restarts"], c.get("detail") or ""]
           for c in st["components"]])  # fmt: skip


@cli.command()
@click.argument("name", type=NAME)
@click.argument("component", required=False, default="learner")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines.")
@click.option("-n", "--lines", type=click.IntRange(min=0), default=100,
              help="Lines from the end to start with.")  # fmt: skip
@click.option("--previous", is_flag=True, help="kube: the crashed container before its restart.")
@backend_options
def logs(name: str, component: str, follow: bool, lines: int, previous: bool, backend: str,
         namespace: str, context: str | None) -> None:  # fmt: skip
    """Print the log of a component (default: learner; actor-N; containers and kube: also a pod name)."""
    launcher = launcher_for(backend, namespace, context)
    try:
        for line in call(launcher.logs, name, component, follow=follow, lines=lines, previous=previous):
            click.echo(line)
    except LauncherError as exc:  # raised while streaming
        fail(str(exc))
    except KeyboardInterrupt:
        pass


@cli.command()
@click.argument("name", type=NAME)
@click.option("--agents", type=int, required=True, help="Logical agents from now on.")
@click.option(
    "--learner-pods",
    type=int,
    help="Pods the learner ranks spread over from now on (an experiment created with --queue only).",
)
@backend_options
def scale(
    name: str, agents: int, learner_pods: int | None, backend: str, namespace: str, context: str | None
) -> None:
    """Run a running experiment with AGENTS agents from now on: in place, the learner not restarted;
    a queued experiment (--queue) is suspended (its learner saves), made again at the new size
    (and --learner-pods), admitted again, and its learner resumes from its checkpoint."""
    click.echo(call(launcher_for(backend, namespace, context).scale, name, agents, learner_pods))


@cli.command()
@click.argument("name", type=NAME)
@backend_options
def delete(name: str, backend: str, namespace: str, context: str | None) -> None:
    """Stop an experiment and remove everything of it (files, containers or cluster objects)."""
    click.echo(call(launcher_for(backend, namespace, context).delete, name))


@cli.command()
@click.argument("name", type=NAME)
@click.option("--port", type=click.IntRange(1, 65535), default=6006, show_default=True)
@backend_options
def tensorboard(name: str, port: int, backend: str, namespace: str, context: str | None) -> None:
    """Serve the experiment's TensorBoard scalars on http://127.0.0.1:PORT."""
    forward = call(launcher_for(backend, namespace, context).tensorboard, name, port)
    click.echo(f"TensorBoard for {name!r}: http://{forward.address}/ (Ctrl-C to stop)", err=True)
    try:
        forward.wait()
    except KeyboardInterrupt:
        pass
    finally:
        forward.close()


@cli.command(hidden=True)
@click.argument("role")
@click.option("--spec", "spec_path", required=True, type=click.Path(path_type=Path, exists=True))
@click.option("--index", type=int, default=0)
def component(role: str, spec_path: Path, index: int) -> None:
    """Run one component (what every launcher starts)."""
    import signal

    from surreal.runtime import preemption

    # Before the heavy imports: in a container this process is PID 1, which ignores a signal it has
    # no handler for, so a SIGTERM during start-up would wait for the grace period's SIGKILL.
    signal.signal(signal.SIGTERM, preemption.on_sigterm)
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
cli.add_command(record)

"""`surreal provision {plan,apply}`: clusters with surreal's node pools (a CPU and a GPU pool)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from surreal import provisioner as prov
from surreal.cli.common import fail, home_dir
from surreal.spec import load_pools_file


@click.group()
def provision() -> None:
    """Plan or create a Kubernetes cluster with surreal's node pools (a CPU and a GPU pool)."""


def _cluster_options(command: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--provider", required=True, type=click.Choice(prov.PROVIDERS),
                     help="Where the cluster runs."),
        click.option("--pools", "pools_file", type=click.Path(path_type=Path),
                     help="YAML file of node pools (default: a CPU pool and a GPU pool)."),
        click.option("--name", default="surreal", show_default=True, help="Cluster name."),
        click.option("--region", help="Cloud region (eks, aks; gke for a regional cluster)."),
        click.option("--zone", help="Cloud zone (gke zonal cluster, the default: us-central1-a)."),
        click.option("--project", help="GKE project (default: gcloud's configured project)."),
        click.option("--resource-group", help="AKS resource group (default: NAME-rg)."),
    ]  # fmt: skip
    for option in reversed(options):
        command = option(command)
    return command


def _plan(provider: str, pools_file: Path | None, **location: Any) -> prov.Plan:
    try:
        pools = load_pools_file(pools_file) if pools_file is not None else None
        return prov.plan(prov.build_cluster(provider, pools=pools, **location))
    except ValueError as exc:
        fail(str(exc), code=2)


@provision.command("plan")
@_cluster_options
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), help="Print the plan as YAML or JSON.")
def plan(output: str | None, **flags: Any) -> None:
    """Print the files and commands that would create the cluster. Runs nothing."""
    click.echo(prov.format_plan(_plan(**flags), output), nl=False)


@provision.command("apply")
@_cluster_options
@click.option("--workdir", type=click.Path(path_type=Path),
              help="Where the files are written (default: $SURREAL_HOME/clusters/NAME).")  # fmt: skip
def apply(workdir: Path | None, **flags: Any) -> None:
    """Create the cluster: write the files, then run the provider's tool (kind, minikube, gcloud,
    eksctl or az), or say exactly what to install."""
    cluster = _plan(**flags)
    target = workdir or home_dir() / "clusters" / cluster.cluster
    for note in cluster.notes:
        click.echo(f"note: {note}", err=True)
    try:
        prov.apply(cluster, target, echo=lambda line: click.echo(line, err=True))
    except prov.ProvisionError as exc:
        fail(str(exc))
    click.echo(f"cluster {cluster.cluster!r} is up ({cluster.provider}); its files are in {target}")

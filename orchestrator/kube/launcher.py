"""The kube backend behind the `Launcher` interface: `KubeClient` (client.py) for one namespace and
kubeconfig context, connected on first use, so `--dry-run` needs no cluster."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from surreal.orchestrator.kube import output as kube_output
from surreal.orchestrator.kube import render as kube_render
from surreal.orchestrator.kube.client import KubeClient
from surreal.orchestrator.kube.pods import Placement as PodPlacement
from surreal.orchestrator.launcher import (
    Forward,
    Launched,
    Launcher,
    Placement,
    UsageError,
    Watcher,
    check_agents,
    check_port_free,
)
from surreal.spec import ExperimentSpec, load_pools_file


class KubeLauncher(Launcher):
    backend = "kube"

    def __init__(self, *, namespace: str = "default", context: str | None = None) -> None:
        self.namespace = namespace
        self.context = context
        self._kube: KubeClient | None = None

    @property
    def kube(self) -> KubeClient:
        if self._kube is None:
            self._kube = KubeClient.connect(self.context)
        return self._kube

    def placement(self, spec: ExperimentSpec, placement: Placement) -> dict[str, PodPlacement] | None:
        """Placement per role from a pools file or the provider's default pools; None: unpinned."""
        from surreal import provisioner as prov

        if not placement.given:
            return None
        try:
            if placement.pools_file is not None:
                pools = load_pools_file(placement.pools_file)
            else:
                pools = prov.default_pools(placement.provider or "")
            return kube_output.placements(spec, pools, placement.provider)
        except ValueError as exc:
            raise UsageError(str(exc)) from None

    def dry_run(self, spec: ExperimentSpec, output: str, placement: Placement) -> str:
        where = self.placement(spec, placement)
        try:
            return kube_output.dry_run(spec, output, token=_token(), placement=where)
        except kube_render.RenderError as exc:
            raise UsageError(str(exc)) from None

    def create(
        self, spec: ExperimentSpec, *, detach: bool, placement: Placement, watch: Watcher | None = None
    ) -> Launched:
        where = self.placement(spec, placement)
        try:
            kube_render.check_capacity(spec)
        except kube_render.RenderError as exc:
            raise UsageError(str(exc)) from None
        self.kube.create(spec, token=_token(), placement=where)
        return Launched(
            spec.name,
            f"experiment {spec.name!r} created in namespace {spec.namespace!r} ({spec.agents} agents); "
            f"watch it: kubectl get pods -n {spec.namespace} -l surreal.io/experiment={spec.name}, "
            f"or `surreal status {spec.name} --backend kube`",
        )

    def list_experiments(self) -> list[dict[str, Any]]:
        return self.kube.list_experiments(self.namespace)

    def status(self, name: str) -> dict[str, Any]:
        return self.kube.status(name, self.namespace)

    def logs(
        self,
        name: str,
        component: str,
        *,
        follow: bool = False,
        lines: int | None = 100,
        previous: bool = False,
    ) -> Iterator[str]:
        return self.kube.logs(name, self.namespace, component, follow=follow, previous=previous, tail=lines)

    def scale(self, name: str, agents: int, learner_pods: int | None = None) -> str:
        check_agents(agents)
        queued = self.kube.spec_of(name, self.namespace).get("queue")
        replicas = self.kube.scale(name, self.namespace, agents, learner_pods)
        if queued:
            pods = f" and {learner_pods} learner pod(s)" if learner_pods else ""
            return (f"experiment {name!r}: suspended (the learner saved), made again with {agents} agents "
                    f"in {replicas} actor pods{pods}; it resumes from its checkpoint once queue {queued!r} "
                    "admits the new size (surreal status: admission)")  # fmt: skip
        return f"experiment {name!r}: {agents} agents in {replicas} actor pods"

    def delete(self, name: str) -> str:
        self.kube.delete(name, self.namespace)
        return f"experiment {name!r} deleted from namespace {self.namespace!r}"

    def tensorboard(self, name: str, port: int) -> Forward:
        check_port_free(port)
        return self.kube.tensorboard(name, self.namespace, port)

    def events(self, name: str) -> Any:
        from surreal.orchestrator import plot

        return plot.read_archive(self.kube.tb_archive(name, self.namespace), name)


def _token() -> str:
    # SURREAL_TOKEN fixes the token (reproducible manifests); otherwise each run makes a new one.
    return os.environ.get("SURREAL_TOKEN") or kube_render.new_token()

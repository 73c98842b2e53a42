"""One renderer per provider; `plan` picks the cluster plan's provider and adds the placement."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from surreal.provisioner.placement import placement_for
from surreal.provisioner.plans import Plan
from surreal.provisioner.pools import ClusterPlan
from surreal.provisioner.providers import aks, eks, gke, kind, minikube

RENDERERS: dict[str, Callable[[ClusterPlan], Plan]] = {
    "kind": kind.render,
    "minikube": minikube.render,
    "gke": gke.render,
    "eks": eks.render,
    "aks": aks.render,
}


def plan(cluster: ClusterPlan) -> Plan:
    """Render what `cluster.provider`'s own tool takes to create the cluster. Pure: runs nothing.
    Its placement shows where each role lands; `learner-gpu`, when there is a GPU pool, is the
    learner of a `--gpu 1` run."""
    shown = {role: placement_for(role, 0, cluster.pools, cluster.provider)
             for role in ("learner", "actor", "evaluator", "tensorboard")}  # fmt: skip
    if any(p.is_gpu for p in cluster.pools):
        shown = {"learner-gpu": placement_for("learner", 1, cluster.pools, cluster.provider), **shown}
    return dataclasses.replace(RENDERERS[cluster.provider](cluster), placement=shown)

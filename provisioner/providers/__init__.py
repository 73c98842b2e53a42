"""One renderer per provider; `plan` picks the cluster plan's provider and adds the placement."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from surreal.provisioner.placement import Placement, placement_for
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


def placement_summary(cluster: ClusterPlan) -> dict[str, Placement]:
    """Where each role lands on this cluster; `learner-gpu` is the learner of a `--gpu 1` run,
    shown when the plan has a GPU pool."""
    shown = {role: placement_for(role, 0, cluster.pools, cluster.provider)
             for role in ("learner", "actor", "evaluator", "tensorboard")}  # fmt: skip
    if any(p.is_gpu for p in cluster.pools):
        shown = {"learner-gpu": placement_for("learner", 1, cluster.pools, cluster.provider), **shown}
    return shown


def plan(cluster: ClusterPlan) -> Plan:
    """Render what `cluster.provider`'s own tool takes to create the cluster. Pure: runs nothing."""
    rendered = RENDERERS[cluster.provider](cluster)
    return dataclasses.replace(rendered, placement=placement_summary(cluster))

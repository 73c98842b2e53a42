"""kind: a Cluster config (kind.x-k8s.io/v1alpha4) whose worker nodes carry the pool labels."""

from __future__ import annotations

from typing import Any

from surreal.provisioner.plans import Plan, dump_yaml
from surreal.provisioner.pools import ClusterPlan, NodePool

CONFIG_FILE = "kind-cluster.yaml"
API_VERSION = "kind.x-k8s.io/v1alpha4"


def kind_config(cluster: ClusterPlan) -> dict[str, Any]:
    """The kind Cluster object: one control-plane node, then `max(1, min_nodes)` workers per CPU
    pool (kind's nodes have no GPUs), labelled; taints go in by a kubeadm JoinConfiguration patch."""
    nodes: list[dict[str, Any]] = [{"role": "control-plane"}]
    for pool in cluster.local_pools:
        nodes += [_worker(pool) for _ in range(max(1, pool.min_nodes))]
    return {"kind": "Cluster", "apiVersion": API_VERSION, "name": cluster.name, "nodes": nodes}


def _worker(pool: NodePool) -> dict[str, Any]:
    node: dict[str, Any] = {"role": "worker", "labels": pool.node_labels}
    if pool.taints:
        patch = {
            "kind": "JoinConfiguration",
            "nodeRegistration": {
                "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in pool.taints]
            },
        }
        node["kubeadmConfigPatches"] = [dump_yaml(patch)]
    return node


def render(cluster: ClusterPlan) -> Plan:
    header = f"# kind cluster for surreal: kind create cluster --config {CONFIG_FILE}\n"
    notes = [
        "kind needs Docker or Podman running; load your image with "
        f"`kind load docker-image IMAGE --name {cluster.name}`.",
        "placement on kind is unpinned (no nodeSelector): see surreal.provisioner.placement_for.",
    ]
    dropped = [p.name for p in cluster.pools if p.is_gpu]
    if dropped:
        notes.append(f"GPU pool(s) {', '.join(dropped)} left out: kind nodes have no GPUs.")
    return Plan(
        provider="kind",
        cluster=cluster.name,
        files={CONFIG_FILE: header + dump_yaml(kind_config(cluster))},
        commands=[["kind", "create", "cluster", "--config", CONFIG_FILE, "--name", cluster.name]],
        notes=notes,
    )

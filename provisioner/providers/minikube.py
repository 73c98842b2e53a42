"""minikube: `minikube start` with one node per pool node, then kubectl labels and taints them."""

from __future__ import annotations

from surreal.provisioner.plans import Plan
from surreal.provisioner.pools import LOCAL_MACHINE, ClusterPlan, NodePool


def _size(pool: NodePool) -> tuple[int, int]:
    match = LOCAL_MACHINE.match(pool.machine_type)
    assert match, "ClusterPlan validates minikube machine types"
    return int(match["cpus"]), int(match["gb"])


def commands(cluster: ClusterPlan) -> list[list[str]]:
    """Start the nodes (minikube sizes every node alike: the largest pool's size), then label and
    taint each node with its pool's labels and taints, pools in order."""
    pools = cluster.local_pools
    owners = [pool for pool in pools for _ in range(max(1, pool.min_nodes))]
    cpus = max(_size(p)[0] for p in pools)
    memory_gb = max(_size(p)[1] for p in pools)
    argv = [["minikube", "start", "--profile", cluster.name, "--nodes", str(len(owners)),
             "--cpus", str(cpus), "--memory", f"{memory_gb}g"]]  # fmt: skip
    kubectl = ["kubectl", "--context", cluster.name]
    for index, pool in enumerate(owners):
        node = cluster.name if index == 0 else f"{cluster.name}-m{index + 1:02d}"  # minikube's names
        labels = [f"{k}={v}" for k, v in pool.node_labels.items()]
        argv.append([*kubectl, "label", "node", node, *labels, "--overwrite"])
        if pool.taints:
            argv.append([*kubectl, "taint", "node", node, *map(str, pool.taints), "--overwrite"])
    return argv


def render(cluster: ClusterPlan) -> Plan:
    notes = [
        f"load your image with `minikube image load IMAGE --profile {cluster.name}`.",
        "placement on minikube is unpinned (no nodeSelector): see surreal.provisioner.placement_for.",
    ]
    dropped = [p.name for p in cluster.pools if p.is_gpu]
    if dropped:
        notes.append(f"GPU pool(s) {', '.join(dropped)} left out: minikube nodes have no GPUs by default.")
    return Plan(provider="minikube", cluster=cluster.name, files={}, commands=commands(cluster),
                notes=notes)  # fmt: skip

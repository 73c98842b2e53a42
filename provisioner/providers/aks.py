"""AKS: az command lines, a resource group, a cluster with a system pool, then one pool per pool."""

from __future__ import annotations

from surreal.provisioner.plans import Plan
from surreal.provisioner.pools import ClusterPlan, NodePool

# AKS needs a System-mode pool at creation, and a spot pool can never be one: a small dedicated
# system pool lets every experiment pool be spot, tainted, or scaled to zero.
SYSTEM_MACHINE = "Standard_D2s_v5"
SYSTEM_POOL = "system"


def resource_group(cluster: ClusterPlan) -> str:
    return cluster.resource_group or f"{cluster.name}-rg"


def create_cluster(cluster: ClusterPlan) -> list[list[str]]:
    group = resource_group(cluster)
    return [
        ["az", "group", "create", "--name", group, "--location", str(cluster.region)],
        ["az", "aks", "create", "--resource-group", group, "--name", cluster.name,
         "--location", str(cluster.region), "--nodepool-name", SYSTEM_POOL, "--node-count", "1",
         "--node-vm-size", SYSTEM_MACHINE, "--generate-ssh-keys"],
    ]  # fmt: skip


def add_pool(cluster: ClusterPlan, pool: NodePool) -> list[str]:
    """`az aks nodepool add` for one pool: a User pool, autoscaled between its bounds."""
    argv = ["az", "aks", "nodepool", "add", "--resource-group", resource_group(cluster),
            "--cluster-name", cluster.name, "--name", pool.name, "--mode", "User",
            "--node-vm-size", pool.machine_type, "--node-count", str(pool.min_nodes),
            "--enable-cluster-autoscaler", "--min-count", str(pool.min_nodes),
            "--max-count", str(pool.max_nodes),
            "--labels", *(f"{k}={v}" for k, v in pool.node_labels.items())]  # fmt: skip
    if pool.taints:
        argv += ["--node-taints", ",".join(map(str, pool.taints))]
    if pool.spot:
        # -1: pay up to the on-demand price, never evicted for price. AKS adds the taint
        # kubernetes.azure.com/scalesetpriority=spot:NoSchedule, which placement tolerates.
        argv += ["--priority", "Spot", "--eviction-policy", "Delete", "--spot-max-price", "-1"]
    return argv


def render(cluster: ClusterPlan) -> Plan:
    commands = create_cluster(cluster) + [add_pool(cluster, p) for p in cluster.pools]
    notes = [
        "az must be logged in (`az login`) to the subscription that pays for the cluster.",
        f"the '{SYSTEM_POOL}' pool ({SYSTEM_MACHINE}) hosts the cluster's own pods; "
        "experiment pools autoscale.",
    ]
    if any(p.is_gpu for p in cluster.pools):
        notes.append(
            "AKS installs the GPU driver but not the NVIDIA device plugin: deploy it "
            "before a --gpu experiment (https://learn.microsoft.com/azure/aks/gpu-cluster)."
        )
    return Plan(provider="aks", cluster=cluster.name, files={}, commands=commands, notes=notes)

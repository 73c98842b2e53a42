"""GKE: gcloud command lines, a cluster with a small system pool, then one node pool per pool."""

from __future__ import annotations

from surreal.provisioner.plans import Plan
from surreal.provisioner.pools import ClusterPlan, NodePool

# Cluster add-ons (DNS, metrics, ...) live on their own small pool, so the experiment pools can
# scale to zero, be spot, and be tainted without starving the cluster's own pods.
SYSTEM_MACHINE = "e2-standard-2"


def _location(cluster: ClusterPlan) -> list[str]:
    flags = ["--zone", cluster.zone] if cluster.zone else ["--region", str(cluster.region)]
    return flags + (["--project", cluster.project] if cluster.project else [])


def create_cluster(cluster: ClusterPlan) -> list[str]:
    return ["gcloud", "container", "clusters", "create", cluster.name, *_location(cluster),
            "--num-nodes", "1", "--machine-type", SYSTEM_MACHINE]  # fmt: skip


def create_pool(cluster: ClusterPlan, pool: NodePool) -> list[str]:
    """`gcloud container node-pools create` for one pool, autoscaled between its bounds.

    `--num-nodes` is per zone (a regional cluster multiplies it); the autoscaler bounds are totals.
    """
    argv = ["gcloud", "container", "node-pools", "create", pool.name, "--cluster", cluster.name,
            *_location(cluster), "--machine-type", pool.machine_type,
            "--num-nodes", str(pool.min_nodes), "--enable-autoscaling",
            "--total-min-nodes", str(pool.min_nodes), "--total-max-nodes", str(pool.max_nodes),
            "--node-labels", ",".join(f"{k}={v}" for k, v in pool.node_labels.items())]  # fmt: skip
    if pool.is_gpu:
        # gpu-driver-version=default: GKE installs the NVIDIA driver itself.
        argv += ["--accelerator",
                 f"type={pool.gpu_type},count={pool.gpu_count},gpu-driver-version=default"]  # fmt: skip
    if pool.taints:
        argv += ["--node-taints", ",".join(map(str, pool.taints))]
    if pool.spot:
        argv.append("--spot")
    return argv


def render(cluster: ClusterPlan) -> Plan:
    commands = [create_cluster(cluster)] + [create_pool(cluster, p) for p in cluster.pools]
    notes = [
        "gcloud must be logged in (`gcloud auth login`) with a project set or --project given.",
        f"the default pool ({SYSTEM_MACHINE}) hosts the cluster's own pods; experiment pools autoscale.",
    ]
    if cluster.region:
        notes.append("regional cluster: --num-nodes is per zone, so the initial count is multiplied.")
    return Plan(provider="gke", cluster=cluster.name, files={}, commands=commands, notes=notes)

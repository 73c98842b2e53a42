"""EKS: an eksctl ClusterConfig (eksctl.io/v1alpha5) with one managed node group per pool."""

from __future__ import annotations

from typing import Any

from surreal.provisioner.plans import Plan, dump_yaml
from surreal.provisioner.pools import ClusterPlan, NodePool

CONFIG_FILE = "eks-cluster.yaml"
API_VERSION = "eksctl.io/v1alpha5"


def cluster_config(cluster: ClusterPlan) -> dict[str, Any]:
    """The eksctl ClusterConfig: metadata (name, region) and `managedNodeGroups`, pools in order."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterConfig",
        "metadata": {"name": cluster.name, "region": cluster.region},
        "managedNodeGroups": [node_group(pool) for pool in cluster.pools],
    }


def node_group(pool: NodePool) -> dict[str, Any]:
    """One managed node group. Spot groups list their instance types (`instanceTypes`), as
    eksctl's spot examples do; GPU instance types get eksctl's GPU AMI and device plugin."""
    group: dict[str, Any] = {"name": pool.name}
    if pool.spot:
        group["instanceTypes"] = [pool.machine_type]
        group["spot"] = True
    else:
        group["instanceType"] = pool.machine_type
    group |= {"minSize": pool.min_nodes, "maxSize": pool.max_nodes, "desiredCapacity": pool.min_nodes,
              "labels": pool.node_labels}  # fmt: skip
    if pool.taints:
        group["taints"] = [{"key": t.key, "value": t.value, "effect": t.effect} for t in pool.taints]
    return group


def render(cluster: ClusterPlan) -> Plan:
    notes = ["eksctl needs AWS credentials (`aws configure`); creating the cluster takes ~20 minutes."]
    if any(p.is_gpu for p in cluster.pools):
        notes.append("eksctl picks the GPU AMI and installs the NVIDIA device plugin for GPU instance types.")
    return Plan(
        provider="eks",
        cluster=cluster.name,
        files={CONFIG_FILE: dump_yaml(cluster_config(cluster))},
        commands=[["eksctl", "create", "cluster", "-f", CONFIG_FILE]],
        notes=notes,
    )

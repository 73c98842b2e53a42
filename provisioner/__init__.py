"""Node pools and cluster providers.

Pools are data (`NodePool`, `Taint`, `ClusterPlan`); `plan` renders what each provider's own
tool takes (a kind config, minikube/gcloud/az command lines, an eksctl ClusterConfig) without
running anything; `apply` writes the files and runs the tool; `placement_for` turns the same
pools into nodeSelector, tolerations and GPU requests for the orchestrator.
"""

from surreal.provisioner.apply import (
    INSTALL,
    CommandFailedError,
    ProvisionError,
    ToolNotFoundError,
    apply,
    write_files,
)
from surreal.provisioner.placement import ROLES, Placement, effective_taints, placement_for
from surreal.provisioner.plans import Plan, format_plan
from surreal.provisioner.pools import (
    GPU_RESOURCE,
    GPU_TAINT,
    LOCAL_PROVIDERS,
    POOL_LABEL,
    PROVIDERS,
    ClusterPlan,
    NodePool,
    Taint,
    build_cluster,
    default_pools,
    pools_from_data,
)
from surreal.provisioner.providers import plan

__all__ = [
    "GPU_RESOURCE", "GPU_TAINT", "INSTALL", "LOCAL_PROVIDERS", "POOL_LABEL", "PROVIDERS", "ROLES",
    "ClusterPlan", "CommandFailedError", "NodePool", "Placement", "Plan", "ProvisionError", "Taint",
    "ToolNotFoundError", "apply", "build_cluster", "default_pools", "effective_taints", "format_plan",
    "placement_for", "plan", "pools_from_data", "write_files",
]  # fmt: skip

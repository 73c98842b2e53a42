"""Where each component runs: nodeSelector, tolerations and GPU count, from the node pools."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from surreal.provisioner.pools import LOCAL_PROVIDERS, POOL_LABEL, PROVIDERS, NodePool, Taint

ROLES = ("learner", "actor", "evaluator", "replay", "tensorboard")

# Taints a provider puts on nodes by itself, so pods placed there must tolerate them too.
AKS_SPOT_TAINT = Taint("kubernetes.azure.com/scalesetpriority", "spot", "NoSchedule")


@dataclass(frozen=True)
class Placement:
    """The scheduling part of a pod spec for one component."""

    node_selector: dict[str, str] = field(default_factory=dict)  # pod spec nodeSelector
    tolerations: list[dict[str, str]] = field(default_factory=list)  # pod spec tolerations
    gpu: int = 0  # nvidia.com/gpu to request (and limit) on the component's container

    def to_dict(self) -> dict[str, Any]:
        return {"nodeSelector": dict(self.node_selector),
                "tolerations": [dict(t) for t in self.tolerations], "gpu": self.gpu}  # fmt: skip


def effective_taints(pool: NodePool, provider: str | None) -> tuple[Taint, ...]:
    """The pool's own taints plus those its provider adds (AKS taints every spot node)."""
    taints = pool.taints
    if provider == "aks" and pool.spot and AKS_SPOT_TAINT not in taints:
        taints += (AKS_SPOT_TAINT,)
    return taints


def placement_for(role: str, gpu: int, pools: Sequence[NodePool], provider: str | None = None) -> Placement:
    """Place `role` on the pools: the learner with `gpu > 0` on the first pool with at least `gpu`
    GPUs per node, everything else on the first CPU pool; a nodeSelector on the pool's label and
    a toleration for each of its taints (with those its provider adds).

    On kind and minikube, or with no pools, only the GPU count is kept: those dev clusters are
    often made by hand without surreal's pool labels, and a nodeSelector no node matches would
    leave the pods Pending forever; a `--gpu` run still asks for its GPU, so a cluster without
    one says so (Insufficient nvidia.com/gpu) instead of training silently on the CPU.

    Raises ValueError for an unknown role or provider, a negative gpu, gpu > 0 for a role other
    than the learner, or when no pool can take the component.
    """
    if role not in ROLES:
        raise ValueError(f"role {role!r} is not one of {', '.join(ROLES)}")
    if provider is not None and provider not in PROVIDERS:
        raise ValueError(f"provider {provider!r} is not one of {', '.join(PROVIDERS)}")
    if not isinstance(gpu, int) or gpu < 0:
        raise ValueError(f"gpu must be an integer >= 0, got {gpu!r}")
    if gpu and role != "learner":
        raise ValueError(f"gpu: only the learner uses GPUs, not the {role}")
    if provider in LOCAL_PROVIDERS or not pools:
        return Placement(gpu=gpu)
    pool = _pool_for(role, gpu, pools)
    tolerations = [t.toleration() for t in effective_taints(pool, provider)]
    return Placement(node_selector={POOL_LABEL: pool.name}, tolerations=tolerations, gpu=gpu)


def _pool_for(role: str, gpu: int, pools: Sequence[NodePool]) -> NodePool:
    if gpu:
        for pool in pools:
            if pool.gpu_count >= gpu:
                return pool
        have = sorted({p.gpu_count for p in pools if p.is_gpu})
        raise ValueError(
            f"gpu: no node pool has {gpu} GPU(s) per node"
            + (f" (GPU pools have {', '.join(map(str, have))})" if have else " (there is no GPU pool)")
        )
    for pool in pools:
        if not pool.is_gpu:
            return pool
    raise ValueError(f"pools: no CPU pool (gpu_count 0) for the {role}")

"""Where each component runs: nodeSelector, tolerations and GPU count, from the node pools."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from surreal.provisioner.pools import GPU_RESOURCE, LOCAL_PROVIDERS, POOL_LABEL, PROVIDERS, NodePool, Taint

ROLES = ("learner", "actor", "evaluator", "tensorboard")

# Taints a provider puts on nodes by itself, so pods placed there must tolerate them too.
AKS_SPOT_TAINT = Taint("kubernetes.azure.com/scalesetpriority", "spot", "NoSchedule")


@dataclass(frozen=True)
class Placement:
    """The scheduling part of a pod spec for one component."""

    node_selector: dict[str, str] = field(default_factory=dict)  # pod spec nodeSelector
    tolerations: list[dict[str, str]] = field(default_factory=list)  # pod spec tolerations
    gpu: int = 0  # nvidia.com/gpu to request (and limit) on the component's container

    @property
    def gpu_resources(self) -> dict[str, str]:
        """Container requests/limits entries for the GPUs ({} without GPUs)."""
        return {GPU_RESOURCE: str(self.gpu)} if self.gpu else {}

    def pod_spec_fields(self) -> dict[str, Any]:
        """`nodeSelector` and `tolerations` for a pod spec, each only when non-empty."""
        fields: dict[str, Any] = {}
        if self.node_selector:
            fields["nodeSelector"] = dict(self.node_selector)
        if self.tolerations:
            fields["tolerations"] = [dict(t) for t in self.tolerations]
        return fields

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
    """Place `role` on the pools: the learner with `gpu > 0` on a GPU pool, everything else on CPU.

    On a cloud cluster (provider gke/eks/aks, or None for "a cluster made from these pools"):
    - learner with gpu > 0: the first GPU pool with at least `gpu` GPUs per node; nodeSelector
      `surreal.io/pool=<pool>`, a toleration for each of the pool's taints (by default
      `nvidia.com/gpu=present:NoSchedule`) and `gpu` nvidia.com/gpu for the container;
    - learner with gpu == 0, actor, evaluator, tensorboard: the first CPU pool, with tolerations
      for its taints (e.g. the taint AKS puts on spot nodes).

    On kind and minikube, or with no pools at all, the placement is empty apart from the GPU count:
    those are one-machine dev clusters, often created by hand (`kind create cluster`, `minikube
    start`) without surreal's pool labels, and a nodeSelector on a label no node has would leave
    the pods Pending forever. Our own kind/minikube configs label their nodes anyway, so `kubectl
    get nodes -L surreal.io/pool` reads the same everywhere. The GPU count is kept: a `--gpu`
    experiment asks for a GPU whatever the cluster, and a cluster without one says so in the
    pod's events (Insufficient nvidia.com/gpu) instead of training silently on the CPU.

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

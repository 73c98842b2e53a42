"""Placement: the learner of a --gpu run on the GPU pool, everything else on the CPU pool."""

from __future__ import annotations

import dataclasses

import pytest

from surreal.provisioner import (
    POOL_LABEL,
    NodePool,
    Placement,
    Taint,
    build_cluster,
    default_pools,
    placement_for,
    plan,
)

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}


@pytest.mark.parametrize("provider", ["gke", "eks", "aks", None])
def test_gpu_learner_goes_to_the_gpu_pool(provider: str | None) -> None:
    where = placement_for("learner", 1, default_pools("gke"), provider)
    assert where.node_selector == {POOL_LABEL: "gpu"}
    assert where.tolerations == [GPU_TOLERATION]
    assert where.gpu == 1


@pytest.mark.parametrize("role", ["actor", "evaluator", "tensorboard", "learner"])
def test_cpu_roles_go_to_the_cpu_pool_without_tolerations(role: str) -> None:
    where = placement_for(role, 0, default_pools("eks"), "eks")
    assert where == Placement(node_selector={POOL_LABEL: "cpu"}, tolerations=[], gpu=0)


def test_the_first_pool_with_enough_gpus_is_chosen() -> None:
    cpu, one = default_pools("gke")
    four = NodePool("gpu4", "a2-highgpu-4g", 0, 1, "nvidia-tesla-a100", 4,
                    taints=(Taint("dedicated", "big", "NoExecute"),))  # fmt: skip
    where = placement_for("learner", 2, (cpu, one, four), "gke")
    assert where.node_selector == {POOL_LABEL: "gpu4"}
    assert where.tolerations == [
        {"key": "dedicated", "operator": "Equal", "value": "big", "effect": "NoExecute"}
    ]
    assert placement_for("learner", 1, (cpu, one, four)).node_selector == {POOL_LABEL: "gpu"}


def test_aks_spot_pools_are_tolerated() -> None:
    cpu, gpu = default_pools("aks")
    spot_cpu = dataclasses.replace(cpu, spot=True)
    where = placement_for("actor", 0, (spot_cpu, gpu), "aks")
    assert where.tolerations == [{"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal",
                                  "value": "spot", "effect": "NoSchedule"}]  # fmt: skip
    # Only AKS taints spot nodes by itself.
    assert placement_for("actor", 0, (spot_cpu, gpu), "gke").tolerations == []


@pytest.mark.parametrize("provider", ["kind", "minikube"])
def test_local_clusters_get_an_unpinned_placement(provider: str) -> None:
    pools = default_pools(provider)
    assert placement_for("actor", 0, pools, provider) == Placement()
    learner = placement_for("learner", 1, pools, provider)
    assert (learner.node_selector, learner.tolerations, learner.gpu) == ({}, [], 1)


def test_no_pools_gives_an_unpinned_placement() -> None:
    assert placement_for("learner", 2, ()) == Placement(gpu=2)


@pytest.mark.parametrize(
    ("role", "gpu", "pools", "message"),
    [
        ("learner", 2, default_pools("gke"), "no node pool has 2 GPU(s) per node (GPU pools have 1)"),
        ("learner", 1, default_pools("gke")[:1], "has 1 GPU(s) per node (there is no GPU pool)"),
        ("actor", 1, default_pools("gke"), "gpu: only the learner uses GPUs, not the actor"),
        ("learner", -1, default_pools("gke"), "gpu must be an integer >= 0"),
        ("trainer", 0, default_pools("gke"), "role 'trainer' is not one of"),
        ("actor", 0, default_pools("gke")[1:], "pools: no CPU pool (gpu_count 0) for the actor"),
    ],
)  # fmt: skip
def test_impossible_placements_are_errors(
    role: str, gpu: int, pools: tuple[NodePool, ...], message: str
) -> None:
    with pytest.raises(ValueError) as info:
        placement_for(role, gpu, pools, "gke")
    assert message in str(info.value)


def test_unknown_provider_is_an_error() -> None:
    with pytest.raises(ValueError, match="provider 'gcp' is not one of"):
        placement_for("actor", 0, default_pools("gke"), "gcp")


def test_plan_shows_the_placement_of_a_gpu_run() -> None:
    shown = plan(build_cluster("eks")).placement
    assert list(shown) == ["learner-gpu", "learner", "actor", "evaluator", "tensorboard"]
    assert shown["learner-gpu"].to_dict() == {
        "nodeSelector": {POOL_LABEL: "gpu"}, "tolerations": [GPU_TOLERATION], "gpu": 1,
    }  # fmt: skip
    assert shown["actor"].to_dict() == {"nodeSelector": {POOL_LABEL: "cpu"}, "tolerations": [], "gpu": 0}
    assert plan(build_cluster("kind")).placement["learner-gpu"].node_selector == {}

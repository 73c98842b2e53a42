"""Node pools as data: validation names the bad field, defaults, YAML files."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from surreal.provisioner import (
    GPU_TAINT,
    POOL_LABEL,
    PROVIDERS,
    ClusterPlan,
    NodePool,
    Taint,
    build_cluster,
    default_pools,
    pools_from_data,
)
from surreal.spec import load_pools_file

CPU = NodePool("cpu", "n2-standard-8", min_nodes=1, max_nodes=4)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"name": "GPU"}, "name must be lowercase"),
        ({"name": "averyverylongname"}, "at most 12"),
        ({"name": "gpu-pool"}, "name must be lowercase"),
        ({"machine_type": ""}, "machine_type must be a non-empty string"),
        ({"min_nodes": -1}, "min_nodes must be an integer >= 0"),
        ({"min_nodes": 1.5}, "min_nodes must be an integer"),
        ({"max_nodes": True}, "max_nodes must be an integer"),
        ({"max_nodes": 0}, "max_nodes (0) must be >= 1"),
        ({"min_nodes": 5, "max_nodes": 4}, "max_nodes (4) must be >= 1 and >= min_nodes (5)"),
        ({"gpu_count": -2}, "gpu_count must be an integer >= 0"),
        ({"gpu_count": 1}, "gpu_type is required when gpu_count is 1"),
        ({"gpu_type": "nvidia-tesla-t4"}, "gpu_count must be >= 1 when gpu_type"),
        ({"spot": "yes"}, "spot must be true or false"),
        ({"labels": {"bad key!": "x"}}, "labels key 'bad key!' is not a valid"),
        ({"labels": {"team": "a b"}}, "labels value 'a b'"),
        ({"labels": {"team": 3}}, "labels value 3"),
        ({"labels": {"team": "x" * 64}}, "labels value"),
        ({"labels": {"node-role.kubernetes.io/worker": ""}}, "reserved by Kubernetes"),
        ({"labels": {POOL_LABEL: "other"}}, f"labels {POOL_LABEL} must equal the pool name"),
        ({"taints": [GPU_TAINT]}, "taints must be a tuple of Taint"),
    ],
)
def test_bad_pool_field_is_named(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match="NodePool") as info:
        dataclasses.replace(CPU, **changes)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("key", "value", "effect", "message"),
    [
        ("nvidia.com/gpu", "present", "NoScheduleX", "effect 'NoScheduleX' must be one of"),
        ("nvidia.com/gpu", "pre sent", "NoSchedule", "taint value 'pre sent'"),
        ("-bad", "x", "NoSchedule", "taint key '-bad'"),
    ],
)
def test_bad_taint_is_named(key: str, value: str, effect: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        Taint(key, value, effect)
    assert message in str(info.value)


def test_taint_renders_like_kubectl_and_tolerates_itself() -> None:
    assert str(GPU_TAINT) == "nvidia.com/gpu=present:NoSchedule"
    assert GPU_TAINT.toleration() == {
        "key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule",
    }  # fmt: skip


def _cluster(**changes: Any) -> ClusterPlan:
    fields: dict[str, Any] = {"name": "rl", "provider": "gke", "pools": default_pools("gke"),
                              "zone": "us-central1-a"}  # fmt: skip
    return ClusterPlan(**(fields | changes))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"provider": "openstack"}, "provider 'openstack' is not one of"),
        ({"name": "My_Cluster"}, "name 'My_Cluster'"),
        ({"name": "x" * 41}, "at most 40"),
        ({"pools": (CPU, CPU)}, "pools: duplicate pool name 'cpu'"),
        ({"pools": default_pools("gke")[1:]}, "pools: at least one CPU pool"),
        ({"pools": [CPU]}, "pools must be a tuple of NodePool"),
        ({"region": "us-central1"}, "region/zone: provider gke needs exactly one"),
        ({"zone": None}, "region/zone: provider gke needs exactly one"),
        ({"provider": "eks", "zone": None}, "region: provider eks needs a region"),
        ({"provider": "eks", "region": "us-west-2"}, "zone: provider eks clusters are regional"),
        ({"provider": "aks"}, "zone: provider aks clusters are regional; give a region, not a zone"),
        ({"provider": "aks", "zone": None}, "region: provider aks needs a region"),
        ({"provider": "kind"}, "region/zone: provider kind runs on this machine"),
        ({"project": "proj-1", "provider": "aks", "zone": None, "region": "eastus"}, "project: only gke"),
        ({"region": "us east; rm -rf /", "zone": None}, "region 'us east; rm -rf /' is not a region name"),
        ({"zone": "US-Central1-a"}, "zone 'US-Central1-a' is not a zone name"),
        ({"project": "p"}, "project 'p' is not a project name"),
        ({"provider": "aks", "zone": None, "region": "eastus", "resource_group": "a b"}, "resource_group 'a"),
        ({"resource_group": "rg"}, "resource_group: only aks"),
        ({"provider": "minikube", "zone": None}, "machine_type 'n2-standard-8' must look like '4cpu-8gb'"),
    ],
)
def test_bad_cluster_field_is_named(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        _cluster(**changes)
    assert message in str(info.value)


def test_eks_needs_an_untainted_node_for_cluster_addons() -> None:
    cpu, gpu = default_pools("eks")
    scaled_to_zero = dataclasses.replace(cpu, min_nodes=0)
    with pytest.raises(ValueError, match="eks needs an untainted pool with min_nodes >= 1"):
        ClusterPlan("rl", "eks", (scaled_to_zero, gpu), region="us-west-2")
    ClusterPlan("rl", "eks", (cpu, gpu), region="us-west-2")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_defaults_are_a_cpu_pool_and_a_tainted_gpu_pool(provider: str) -> None:
    cpu, gpu = default_pools(provider)
    assert (cpu.name, cpu.gpu_count, cpu.taints) == ("cpu", 0, ())
    assert cpu.node_labels == {POOL_LABEL: "cpu"}
    assert (gpu.name, gpu.gpu_count, gpu.min_nodes) == ("gpu", 1, 0)
    assert gpu.taints == (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
    assert gpu.node_labels == {POOL_LABEL: "gpu"}
    assert build_cluster(provider).pools == (cpu, gpu)


def test_pool_label_is_implied_and_first() -> None:
    pool = NodePool("cpu", "m5.large", labels={"team": "rl"})
    assert list(pool.node_labels.items()) == [(POOL_LABEL, "cpu"), ("team", "rl")]


def test_build_cluster_fills_the_provider_default_location() -> None:
    assert build_cluster("gke").zone == "us-central1-a"
    assert build_cluster("gke", region="europe-west4").region == "europe-west4"
    assert build_cluster("gke", region="europe-west4").zone is None
    assert build_cluster("eks").region == "us-west-2"
    assert build_cluster("aks", name="exp").region == "eastus"
    with pytest.raises(ValueError, match="provider 'gcp' is not one of"):
        build_cluster("gcp")


POOLS_YAML = """
pools:
  - name: cpu
    machine_type: n2-standard-16
    min_nodes: 2
    max_nodes: 20
    spot: true
    labels: {team: rl}
  - name: gpu
    machine_type: a2-highgpu-1g
    gpu_type: nvidia-tesla-a100
    gpu_count: 1
    max_nodes: 2
    taints:
      - {key: nvidia.com/gpu, value: present, effect: NoSchedule}
"""


def test_load_pools_from_yaml(tmp_path: Path) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text(POOLS_YAML)
    cpu, gpu = load_pools_file(path)
    assert cpu == NodePool("cpu", "n2-standard-16", 2, 20, spot=True, labels={"team": "rl"})
    assert gpu == NodePool("gpu", "a2-highgpu-1g", 0, 2, "nvidia-tesla-a100", 1, taints=(GPU_TAINT,))
    cluster = build_cluster("gke", pools=load_pools_file(path))
    assert cluster.pools == (cpu, gpu)


def test_pools_round_trip_through_yaml(tmp_path: Path) -> None:
    pools = default_pools("aks")
    path = tmp_path / "pools.yaml"
    data = [dict(dataclasses.asdict(p), taints=[dataclasses.asdict(t) for t in p.taints]) for p in pools]
    path.write_text(yaml.safe_dump({"pools": data}))
    assert load_pools_file(path) == pools


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "expected a mapping with one key, 'pools'"),
        ({"pools": [], "x": 1}, "expected a mapping with one key, 'pools'"),
        ({"pools": []}, "pools must be a non-empty list"),
        ({"pools": ["cpu"]}, "pools[0]: a node pool must be a mapping"),
        ({"pools": [{"name": "cpu"}]}, "pools[0]: missing field 'machine_type'"),
        ({"pools": [{"name": "cpu", "machine_type": "m", "gpus": 1}]}, "pools[0]: unknown field 'gpus'"),
        (
            {
                "pools": [
                    {"name": "cpu", "machine_type": "m"},
                    {"name": "g", "machine_type": "m", "gpu_count": 1},
                ]
            },
            "pools[1]: NodePool 'g': gpu_type is required",
        ),
        ({"pools": [{"name": "cpu", "machine_type": "m", "taints": "x"}]}, "pools[0]: taints must be a list"),
        ({"pools": [{"name": "cpu", "machine_type": "m", "taints": [{"value": "v"}]}]}, "taints[0] must be"),
        ({"pools": [{"name": "cpu", "machine_type": "m", "max_nodes": "3"}]}, "max_nodes must be an integer"),
        ({"pools": [{"name": "cpu", "machine_type": "m", "labels": ["a=b"]}]}, "labels must be a mapping"),
        (
            {"pools": [{"name": "cpu", "machine_type": "m", "labels": {1: "a"}}]},
            "labels key 1 must be a string",
        ),
    ],
)
def test_bad_pools_file_names_the_place(data: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        pools_from_data(data, source="pools.yaml")
    assert str(info.value).startswith("pools.yaml: ")
    assert message in str(info.value)


def test_unreadable_or_invalid_pools_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read pools file .*missing.yaml"):
        load_pools_file(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("pools: [\n")
    with pytest.raises(ValueError, match="malformed YAML in pools file"):
        load_pools_file(bad)
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)  # refused unread: never waited on
    with pytest.raises(ValueError, match="pools file .*fifo.yaml' is not a regular file"):
        load_pools_file(fifo)

"""What each provider's tool is given: schema-checked configs and exact command lines."""

from __future__ import annotations

import copy
import dataclasses
import json
import shlex
from typing import Any

import jsonschema
import pytest
import yaml
from jsonschema.protocols import Validator

from surreal.provisioner import (
    GPU_TAINT,
    POOL_LABEL,
    PROVIDERS,
    ClusterPlan,
    NodePool,
    Taint,
    build_cluster,
    default_pools,
    format_plan,
    plan,
)

GPU_TAINT_DATA = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def _kind_config(cluster: ClusterPlan) -> dict[str, Any]:
    rendered = plan(cluster)
    assert list(rendered.files) == ["kind-cluster.yaml"]
    return yaml.safe_load(rendered.files["kind-cluster.yaml"])


# --- kind -----------------------------------------------------------------------------------------


def test_kind_config_matches_kinds_schema(kind_schema: Validator) -> None:
    config = _kind_config(build_cluster("kind", name="rl"))
    kind_schema.validate(config)
    assert config == {
        "kind": "Cluster", "apiVersion": "kind.x-k8s.io/v1alpha4", "name": "rl",
        "nodes": [{"role": "control-plane"}, {"role": "worker", "labels": {POOL_LABEL: "cpu"}}],
    }  # fmt: skip


def test_kind_workers_follow_the_cpu_pools_and_taints_become_kubeadm_patches(kind_schema: Validator) -> None:
    cpu = NodePool("cpu", "4cpu-8gb", min_nodes=2, max_nodes=2, labels={"team": "rl"})
    infra = NodePool("infra", "2cpu-4gb", max_nodes=1, taints=(Taint("dedicated", "infra", "NoSchedule"),))
    gpu = default_pools("kind")[1]
    config = _kind_config(ClusterPlan("rl", "kind", (cpu, infra, gpu)))
    kind_schema.validate(config)
    workers = config["nodes"][1:]
    assert [w["labels"] for w in workers] == [{POOL_LABEL: "cpu", "team": "rl"}] * 2 + [{POOL_LABEL: "infra"}]
    assert "kubeadmConfigPatches" not in workers[0]
    (patch,) = workers[2]["kubeadmConfigPatches"]
    assert yaml.safe_load(patch) == {"kind": "JoinConfiguration", "nodeRegistration": {
        "taints": [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]}}  # fmt: skip
    assert any(
        "GPU pool(s) gpu left out" in note for note in plan(ClusterPlan("rl", "kind", (cpu, gpu))).notes
    )


def test_kind_command_line() -> None:
    assert plan(build_cluster("kind", name="rl")).commands == [
        ["kind", "create", "cluster", "--config", "kind-cluster.yaml", "--name", "rl"]
    ]


@pytest.mark.parametrize(
    "breakage",
    [
        lambda c: c.update(apiVersion="kind.x-k8s.io/v1alpha3"),
        lambda c: c.update(kind="KindCluster"),
        lambda c: c.update(name="My_Cluster"),
        lambda c: c.update(nodeLabels={}),
        lambda c: c["nodes"][1].update(labels={POOL_LABEL: 1}),
        lambda c: c["nodes"][1].update(taints=[GPU_TAINT_DATA]),
        lambda c: c["nodes"][1].update(role="gpu-worker"),
        lambda c: c["nodes"].pop(0),
        lambda c: c.update(networking={"kubeProxyMode": "userspace"}),
        lambda c: c["nodes"][0].update(extraPortMappings=[{"containerPort": 70000}]),
        lambda c: c["nodes"][0].update(extraMounts=[{"hostPath": "/x", "readonly": True}]),
    ],
)
def test_the_kind_schema_rejects_what_kind_rejects(kind_schema: Validator, breakage: Any) -> None:
    config = copy.deepcopy(_kind_config(build_cluster("kind")))
    breakage(config)
    with pytest.raises(jsonschema.ValidationError):
        kind_schema.validate(config)


def test_the_kind_schema_accepts_kinds_documented_fields(kind_schema: Validator) -> None:
    kind_schema.validate({
        "kind": "Cluster", "apiVersion": "kind.x-k8s.io/v1alpha4", "name": "dev.1",
        "featureGates": {"CSIMigration": True}, "runtimeConfig": {"api/alpha": "false"},
        "networking": {"ipFamily": "ipv6", "apiServerAddress": "127.0.0.1", "apiServerPort": 6443,
                       "podSubnet": "10.244.0.0/16", "disableDefaultCNI": True, "kubeProxyMode": "ipvs"},
        "containerdConfigPatches": ["[plugins]\n"], "kubeadmConfigPatches": ["kind: ClusterConfiguration\n"],
        "nodes": [
            {"role": "control-plane", "image": "kindest/node:v1.31.0",
             "extraPortMappings": [{"containerPort": 80, "hostPort": 8080, "listenAddress": "0.0.0.0",
                                    "protocol": "TCP"}],
             "extraMounts": [{"hostPath": "/data", "containerPath": "/data", "readOnly": True,
                              "propagation": "HostToContainer"}]},
            {"labels": {"x": "y"}, "kubeadmConfigPatchesJSON6902": [
                {"group": "kubeadm.k8s.io", "version": "v1beta3", "kind": "JoinConfiguration",
                 "patch": "[]"}]},
        ],
    })  # fmt: skip


# --- eks ------------------------------------------------------------------------------------------


def _eks_config(cluster: ClusterPlan) -> dict[str, Any]:
    rendered = plan(cluster)
    assert rendered.commands == [["eksctl", "create", "cluster", "-f", "eks-cluster.yaml"]]
    return yaml.safe_load(rendered.files["eks-cluster.yaml"])


def test_eksctl_config_has_a_cpu_and_a_gpu_managed_node_group(eksctl_schema: Validator) -> None:
    config = _eks_config(build_cluster("eks", name="rl", region="eu-west-1"))
    eksctl_schema.validate(config)
    assert config["metadata"] == {"name": "rl", "region": "eu-west-1"}
    cpu, gpu = config["managedNodeGroups"]
    assert cpu == {"name": "cpu", "instanceType": "m5.2xlarge", "minSize": 1, "maxSize": 8,
                   "desiredCapacity": 1, "labels": {POOL_LABEL: "cpu"}}  # fmt: skip
    assert gpu == {"name": "gpu", "instanceType": "g4dn.2xlarge", "minSize": 0, "maxSize": 2,
                   "desiredCapacity": 0, "labels": {POOL_LABEL: "gpu"},
                   "taints": [GPU_TAINT_DATA]}  # fmt: skip


def test_eksctl_spot_groups_list_their_instance_types(eksctl_schema: Validator) -> None:
    cpu, gpu = default_pools("eks")
    cluster = ClusterPlan("rl", "eks", (cpu, dataclasses.replace(gpu, spot=True)), region="us-east-1")
    config = _eks_config(cluster)
    eksctl_schema.validate(config)
    spot = config["managedNodeGroups"][1]
    assert (spot["instanceTypes"], spot["spot"], "instanceType" in spot) == (["g4dn.2xlarge"], True, False)


@pytest.mark.parametrize(
    "breakage",
    [
        lambda c: c.update(apiVersion="eksctl.io/v1alpha4"),
        lambda c: c["metadata"].pop("region"),
        lambda c: c["managedNodeGroups"][1]["taints"][0].update(effect="NO_SCHEDULE"),
        lambda c: c["managedNodeGroups"][1].update(instanceTypes=["g4dn.xlarge"]),
        lambda c: c["managedNodeGroups"][0].update(minSize="1"),
        lambda c: c["managedNodeGroups"][0].update(nodeLabels={}),
        lambda c: c["managedNodeGroups"][0]["labels"].update(gpu=True),
        lambda c: c.update(nodegroups=[]),
    ],
)
def test_the_eksctl_schema_rejects_broken_configs(eksctl_schema: Validator, breakage: Any) -> None:
    config = copy.deepcopy(_eks_config(build_cluster("eks")))
    breakage(config)
    with pytest.raises(jsonschema.ValidationError):
        eksctl_schema.validate(config)


# --- gke ------------------------------------------------------------------------------------------


def test_gcloud_command_lines() -> None:
    commands = plan(build_cluster("gke", name="rl", zone="europe-west4-a")).commands
    where = ["--zone", "europe-west4-a"]
    assert commands == [
        ["gcloud", "container", "clusters", "create", "rl", *where, "--num-nodes", "1",
         "--machine-type", "e2-standard-2"],
        ["gcloud", "container", "node-pools", "create", "cpu", "--cluster", "rl", *where,
         "--machine-type", "n2-standard-8", "--num-nodes", "1", "--enable-autoscaling",
         "--total-min-nodes", "1", "--total-max-nodes", "8", "--node-labels", "surreal.io/pool=cpu"],
        ["gcloud", "container", "node-pools", "create", "gpu", "--cluster", "rl", *where,
         "--machine-type", "n1-standard-8", "--num-nodes", "0", "--enable-autoscaling",
         "--total-min-nodes", "0", "--total-max-nodes", "2", "--node-labels", "surreal.io/pool=gpu",
         "--accelerator", "type=nvidia-tesla-t4,count=1,gpu-driver-version=default",
         "--node-taints", "nvidia.com/gpu=present:NoSchedule"],
    ]  # fmt: skip


def test_gcloud_spot_region_project_and_several_labels() -> None:
    cpu = NodePool("cpu", "c2-standard-8", 0, 50, spot=True, labels={"team": "rl"},
                   taints=(Taint("spot", "true", "PreferNoSchedule"),))  # fmt: skip
    cluster = ClusterPlan("rl", "gke", (cpu,), region="us-central1", project="my-proj")
    create, pool = plan(cluster).commands
    assert create[5:9] == ["--region", "us-central1", "--project", "my-proj"]
    assert pool[-5:] == ["--node-labels", "surreal.io/pool=cpu,team=rl", "--node-taints",
                         "spot=true:PreferNoSchedule", "--spot"]  # fmt: skip
    assert any("per zone" in note for note in plan(cluster).notes)


# --- aks ------------------------------------------------------------------------------------------


def test_az_command_lines() -> None:
    commands = plan(build_cluster("aks", name="rl", region="westeurope")).commands
    rg = ["--resource-group", "rl-rg"]
    assert commands == [
        ["az", "group", "create", "--name", "rl-rg", "--location", "westeurope"],
        ["az", "aks", "create", *rg, "--name", "rl", "--location", "westeurope", "--nodepool-name",
         "system", "--node-count", "1", "--node-vm-size", "Standard_D2s_v5", "--generate-ssh-keys"],
        ["az", "aks", "nodepool", "add", *rg, "--cluster-name", "rl", "--name", "cpu", "--mode", "User",
         "--node-vm-size", "Standard_D8s_v5", "--node-count", "1", "--enable-cluster-autoscaler",
         "--min-count", "1", "--max-count", "8", "--labels", "surreal.io/pool=cpu"],
        ["az", "aks", "nodepool", "add", *rg, "--cluster-name", "rl", "--name", "gpu", "--mode", "User",
         "--node-vm-size", "Standard_NC8as_T4_v3", "--node-count", "0", "--enable-cluster-autoscaler",
         "--min-count", "0", "--max-count", "2", "--labels", "surreal.io/pool=gpu",
         "--node-taints", "nvidia.com/gpu=present:NoSchedule"],
    ]  # fmt: skip


def test_az_spot_pool_and_resource_group() -> None:
    cpu = NodePool("cpu", "Standard_F8s_v2", 0, 20, spot=True, labels={"team": "rl"})
    cluster = ClusterPlan("rl", "aks", (cpu,), region="eastus", resource_group="ml")
    *_, add = plan(cluster).commands
    assert add[4:6] == ["--resource-group", "ml"]
    # az takes labels space-separated: one argument each.
    assert add[add.index("--labels") + 1 : add.index("--labels") + 3] == ["surreal.io/pool=cpu", "team=rl"]
    assert add[-6:] == ["--priority", "Spot", "--eviction-policy", "Delete", "--spot-max-price", "-1"]


# --- minikube -------------------------------------------------------------------------------------


def test_minikube_command_lines() -> None:
    cpu = NodePool("cpu", "4cpu-8gb", min_nodes=2, max_nodes=2)
    infra = NodePool("infra", "6cpu-4gb", max_nodes=1, taints=(Taint("dedicated", "infra", "NoSchedule"),))
    gpu = default_pools("minikube")[1]
    commands = plan(ClusterPlan("rl", "minikube", (cpu, infra, gpu))).commands
    kubectl = ["kubectl", "--context", "rl"]
    assert commands == [
        ["minikube", "start", "--profile", "rl", "--nodes", "3", "--cpus", "6", "--memory", "8g"],
        [*kubectl, "label", "node", "rl", "surreal.io/pool=cpu", "--overwrite"],
        [*kubectl, "label", "node", "rl-m02", "surreal.io/pool=cpu", "--overwrite"],
        [*kubectl, "label", "node", "rl-m03", "surreal.io/pool=infra", "--overwrite"],
        [*kubectl, "taint", "node", "rl-m03", "dedicated=infra:NoSchedule", "--overwrite"],
    ]


# --- the printed plan -----------------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
def test_plan_prints_as_yaml_json_and_text(provider: str) -> None:
    rendered = plan(build_cluster(provider))
    as_yaml = yaml.safe_load(format_plan(rendered, "yaml"))
    assert as_yaml == json.loads(format_plan(rendered, "json")) == rendered.to_data()
    assert as_yaml["provider"] == provider
    text = format_plan(rendered)
    for argv in rendered.commands:
        assert shlex.join(argv) in text
    for body in rendered.files.values():
        assert body.rstrip("\n") in text


def test_printed_kind_plan_carries_a_config_kind_accepts(kind_schema: Validator) -> None:
    printed = yaml.safe_load(format_plan(plan(build_cluster("kind")), "yaml"))
    kind_schema.validate(yaml.safe_load(printed["files"]["kind-cluster.yaml"]))


def test_unknown_output_format() -> None:
    with pytest.raises(ValueError, match="output 'toml' must be yaml or json"):
        format_plan(plan(build_cluster("kind")), "toml")


def test_gpu_taint_constant_is_the_documented_one() -> None:
    assert str(GPU_TAINT) == "nvidia.com/gpu=present:NoSchedule"

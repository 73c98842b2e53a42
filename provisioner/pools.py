"""Node pools and cluster plans as data: validated frozen dataclasses, defaults, YAML loading.

A pool is what a provider's tool creates (a GKE node pool, an EKS managed node group, an AKS
node pool, labelled kind/minikube nodes); placement (`surreal.provisioner.placement`) reads the
same objects, so the cluster and the experiments placed on it cannot disagree about labels.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

PROVIDERS = ("kind", "minikube", "gke", "eks", "aks")
LOCAL_PROVIDERS = frozenset({"kind", "minikube"})

POOL_LABEL = "surreal.io/pool"
GPU_RESOURCE = "nvidia.com/gpu"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

# AKS is the strictest provider (Linux pool names: lowercase letters and digits, 12 at most), so
# one rule keeps a pools file portable across every provider.
_POOL_NAME = re.compile(r"^[a-z][a-z0-9]{0,11}$")
# GKE cluster names: a DNS label of at most 40 characters starting with a letter; it also
# satisfies kind (`^[a-z0-9.-]+$`), EKS and AKS.
_CLUSTER_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")
# What each provider names its places and containers (us-central1, us-central1-a, eu-west-2,
# eastus; a GCP project id; an Azure resource group): anything else is not one, whatever it holds.
_LOCATION_NAMES = {  # and an example of each
    "region": (re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$"), "us-west-2"),
    "zone": (re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$"), "us-central1-a"),
    "project": (re.compile(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$"), "my-project-123"),
    "resource_group": (re.compile(r"^[-\w.()]{0,89}[-\w()]$"), "rl-rg"),
}
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")
# minikube gives every node the same --cpus/--memory, read from machine types like "4cpu-8gb".
LOCAL_MACHINE = re.compile(r"^(?P<cpus>[1-9][0-9]*)cpu-(?P<gb>[1-9][0-9]*)gb$")


def _check_key(owner: str, what: str, key: str) -> None:
    """A Kubernetes qualified name (`prefix/name`), outside the reserved prefixes."""
    if not isinstance(key, str):
        raise ValueError(f"{owner}: {what} key {key!r} must be a string")
    prefix, _, name = key.rpartition("/")
    if not _LABEL_NAME.match(name) or (prefix and not (_DNS_SUBDOMAIN.match(prefix) and len(prefix) <= 253)):
        raise ValueError(f"{owner}: {what} key {key!r} is not a valid Kubernetes label key")
    if prefix.endswith(("kubernetes.io", "k8s.io")) and what == "labels":
        # kubelets may not set labels under these prefixes on themselves, and providers own them.
        raise ValueError(f"{owner}: labels key {key!r} uses a prefix reserved by Kubernetes")


def _check_value(owner: str, what: str, key: str, value: object) -> None:
    if not isinstance(value, str) or not _LABEL_VALUE.match(value):
        raise ValueError(f"{owner}: {what} value {value!r} for {key!r} is not a valid label value")


@dataclass(frozen=True)
class Taint:
    """A node taint; pods placed on the pool get a toleration that matches it exactly."""

    key: str  # qualified name, e.g. "nvidia.com/gpu"
    value: str  # label-style value, e.g. "present" (may be empty)
    effect: str  # one of NoSchedule, PreferNoSchedule, NoExecute

    def __post_init__(self) -> None:
        _check_key("Taint", "taint", self.key)
        _check_value("Taint", "taint", self.key, self.value)
        if self.effect not in TAINT_EFFECTS:
            raise ValueError(f"Taint {self.key!r}: effect {self.effect!r} must be one of {TAINT_EFFECTS}")

    def __str__(self) -> str:
        """`key=value:Effect`, the form gcloud, az and kubectl take."""
        return f"{self.key}={self.value}:{self.effect}"

    def toleration(self) -> dict[str, str]:
        """The Kubernetes toleration that matches this taint exactly."""
        return {"key": self.key, "operator": "Equal", "value": self.value, "effect": self.effect}


GPU_TAINT = Taint(GPU_RESOURCE, "present", "NoSchedule")


@dataclass(frozen=True)
class NodePool:
    """One group of identical nodes that a provider creates and scales."""

    name: str  # lowercase letters and digits, starting with a letter, at most 12 (AKS' rule)
    machine_type: str  # provider machine type (n2-standard-8, m5.2xlarge, ...); "4cpu-8gb" locally
    min_nodes: int = 0  # autoscaler lower bound; also the node count created up front
    max_nodes: int = 1  # autoscaler upper bound, >= max(1, min_nodes)
    gpu_type: str | None = None  # accelerator (GKE type, e.g. nvidia-tesla-t4); required iff gpu_count
    gpu_count: int = 0  # GPUs per node; 0 = a CPU pool
    spot: bool = False  # spot/preemptible capacity: cheaper, may be reclaimed at any time
    labels: dict[str, str] = field(default_factory=dict)  # extra node labels (POOL_LABEL is implied)
    taints: tuple[Taint, ...] = ()  # node taints; placement adds the matching tolerations

    def __post_init__(self) -> None:
        owner = f"NodePool {self.name!r}"
        if not isinstance(self.name, str) or not _POOL_NAME.match(self.name):
            raise ValueError(
                f"{owner}: name must be lowercase letters and digits, start with a letter, "
                "at most 12 characters (the strictest provider, AKS, allows no more)"
            )
        if not isinstance(self.machine_type, str) or not self.machine_type.strip():
            raise ValueError(f"{owner}: machine_type must be a non-empty string")
        for what in ("min_nodes", "max_nodes", "gpu_count"):
            value = getattr(self, what)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{owner}: {what} must be an integer >= 0, got {value!r}")
        if self.max_nodes < max(1, self.min_nodes):
            raise ValueError(
                f"{owner}: max_nodes ({self.max_nodes}) must be >= 1 and >= min_nodes ({self.min_nodes})"
            )
        if self.gpu_count > 0 and not self.gpu_type:
            raise ValueError(f"{owner}: gpu_type is required when gpu_count is {self.gpu_count}")
        if self.gpu_count == 0 and self.gpu_type:
            raise ValueError(f"{owner}: gpu_count must be >= 1 when gpu_type is {self.gpu_type!r}")
        if not isinstance(self.spot, bool):
            raise ValueError(f"{owner}: spot must be true or false, got {self.spot!r}")
        self._check_labels_and_taints(owner)

    def _check_labels_and_taints(self, owner: str) -> None:
        if not isinstance(self.labels, Mapping):
            raise ValueError(f"{owner}: labels must be a mapping of strings")
        for key, value in self.labels.items():
            _check_key(owner, "labels", key)
            _check_value(owner, "labels", key, value)
        if self.labels.get(POOL_LABEL, self.name) != self.name:
            got = self.labels[POOL_LABEL]
            raise ValueError(f"{owner}: labels {POOL_LABEL} must equal the pool name, got {got!r}")
        if not isinstance(self.taints, tuple) or not all(isinstance(t, Taint) for t in self.taints):
            raise ValueError(f"{owner}: taints must be a tuple of Taint")

    @property
    def is_gpu(self) -> bool:
        return self.gpu_count > 0

    @property
    def node_labels(self) -> dict[str, str]:
        """Every label a node of this pool carries; `surreal.io/pool=<name>` always comes first."""
        return {POOL_LABEL: self.name, **self.labels}


@dataclass(frozen=True)
class ClusterPlan:
    """What to provision: a named cluster on one provider, in one place, with its node pools."""

    name: str  # cluster name (DNS label, at most 40 characters)
    provider: str  # one of PROVIDERS
    pools: tuple[NodePool, ...]  # at least one CPU pool (actors run there); unique names
    region: str | None = None  # gke (regional cluster), eks and aks (required for both)
    zone: str | None = None  # gke only (zonal cluster); exactly one of region/zone for gke
    project: str | None = None  # gke: --project; None uses gcloud's configured project
    resource_group: str | None = None  # aks: the resource group created to hold the cluster

    def __post_init__(self) -> None:
        if self.provider not in PROVIDERS:
            raise ValueError(f"provider {self.provider!r} is not one of {', '.join(PROVIDERS)}")
        if not isinstance(self.name, str) or not _CLUSTER_NAME.match(self.name):
            raise ValueError(
                f"name {self.name!r}: a cluster name is lowercase letters, digits and '-', "
                "starts with a letter, at most 40 characters"
            )
        if not isinstance(self.pools, tuple) or not all(isinstance(p, NodePool) for p in self.pools):
            raise ValueError("pools must be a tuple of NodePool")
        names = [p.name for p in self.pools]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"pools: duplicate pool name {duplicates[0]!r}")
        if not any(not p.is_gpu for p in self.pools):
            raise ValueError("pools: at least one CPU pool (gpu_count 0) is needed for the actors")
        self._check_location()
        self._check_provider_rules()

    def _check_location(self) -> None:
        where = f"provider {self.provider}"
        for key, (pattern, example) in _LOCATION_NAMES.items():
            value = getattr(self, key)
            bad = not isinstance(value, str) or len(value) > 90 or not pattern.match(value)
            if value is not None and bad:
                raise ValueError(f"{key} {str(value)[:64]!r} is not a {key.replace('_', ' ')} name (such as "
                                 f"{example})")  # fmt: skip
        if self.provider in LOCAL_PROVIDERS and (self.region or self.zone):
            raise ValueError(f"region/zone: {where} runs on this machine and takes neither")
        if self.provider == "gke" and bool(self.region) == bool(self.zone):
            raise ValueError(f"region/zone: {where} needs exactly one of region (regional) or zone (zonal)")
        if self.provider in ("eks", "aks"):
            if self.zone:
                raise ValueError(f"zone: {where} clusters are regional; give a region, not a zone")
            if not self.region:
                raise ValueError(f"region: {where} needs a region")
        if self.project and self.provider != "gke":
            raise ValueError(f"project: only gke takes a project, not {where}")
        if self.resource_group and self.provider != "aks":
            raise ValueError(f"resource_group: only aks takes a resource group, not {where}")

    def _check_provider_rules(self) -> None:
        if self.provider == "minikube":
            for pool in self.local_pools:
                if not LOCAL_MACHINE.match(pool.machine_type):
                    raise ValueError(
                        f"NodePool {pool.name!r}: machine_type {pool.machine_type!r} must look like "
                        "'4cpu-8gb' for minikube (its --cpus and --memory per node)"
                    )
        if self.provider == "eks" and not any(p.min_nodes >= 1 and not p.taints for p in self.pools):
            # EKS has no node group of its own: without an untainted node CoreDNS never starts.
            raise ValueError("pools: eks needs an untainted pool with min_nodes >= 1 for cluster add-ons")

    @property
    def local_pools(self) -> tuple[NodePool, ...]:
        """The pools a kind/minikube cluster gets: CPU pools only (their nodes have no GPUs)."""
        return tuple(p for p in self.pools if not p.is_gpu)


# Per provider: (CPU machine, GPU machine, GPU type). Each GPU machine carries one NVIDIA T4: the
# cheapest card that trains surreal's networks well; T4 attaches to N1 machines only on GKE.
_DEFAULT_MACHINES: dict[str, tuple[str, str, str]] = {
    "gke": ("n2-standard-8", "n1-standard-8", "nvidia-tesla-t4"),
    "eks": ("m5.2xlarge", "g4dn.2xlarge", "nvidia-t4"),
    "aks": ("Standard_D8s_v5", "Standard_NC8as_T4_v3", "nvidia-t4"),
    "kind": ("4cpu-8gb", "4cpu-8gb", "nvidia-t4"),
    "minikube": ("4cpu-8gb", "4cpu-8gb", "nvidia-t4"),
}


def default_pools(provider: str) -> tuple[NodePool, ...]:
    """A CPU pool for actors, evaluator and TensorBoard, and a GPU pool for the learner, tainted
    as GKE taints GPU nodes (only a learner placed there uses them) and scaled from zero (it costs
    nothing until a `--gpu` experiment asks for it)."""
    if provider not in _DEFAULT_MACHINES:
        raise ValueError(f"provider {provider!r} is not one of {', '.join(PROVIDERS)}")
    cpu_machine, gpu_machine, gpu_type = _DEFAULT_MACHINES[provider]
    cpu = NodePool("cpu", cpu_machine, min_nodes=1, max_nodes=8, labels={POOL_LABEL: "cpu"})
    gpu = NodePool(
        "gpu", gpu_machine, min_nodes=0, max_nodes=2, gpu_type=gpu_type, gpu_count=1,
        labels={POOL_LABEL: "gpu"}, taints=(GPU_TAINT,),
    )  # fmt: skip
    return (cpu, gpu)


_POOL_FIELDS = ("name", "machine_type", "min_nodes", "max_nodes", "gpu_type", "gpu_count", "spot",
                "labels", "taints")  # fmt: skip
_TAINT_FIELDS = ("key", "value", "effect")


def pools_from_data(data: object, source: str = "pools") -> tuple[NodePool, ...]:
    """Pools from parsed YAML/JSON: `{"pools": [{name, machine_type, ...}, ...]}`.

    Errors name the source, the pool's index and the field, e.g. `pools.yaml: pools[1]: ...`.
    """
    if not isinstance(data, Mapping) or set(data) != {"pools"}:
        raise ValueError(f"{source}: expected a mapping with one key, 'pools' (a list of node pools)")
    items = data["pools"]
    if not isinstance(items, Sequence) or isinstance(items, str) or not items:
        raise ValueError(f"{source}: pools must be a non-empty list")
    pools = []
    for index, item in enumerate(items):
        where = f"{source}: pools[{index}]"
        try:
            pools.append(_pool_from_mapping(item, where))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from None
    return tuple(pools)


def _pool_from_mapping(item: object, where: str) -> NodePool:
    if not isinstance(item, Mapping):
        raise ValueError("a node pool must be a mapping")
    unknown = sorted(set(item) - set(_POOL_FIELDS))
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r} (fields: {', '.join(_POOL_FIELDS)})")
    for required in ("name", "machine_type"):
        if required not in item:
            raise ValueError(f"missing field {required!r}")
    fields: dict[str, Any] = dict(item)
    labels = fields.get("labels") or {}
    fields["labels"] = dict(labels) if isinstance(labels, Mapping) else labels
    taints = fields.get("taints") or []
    if not isinstance(taints, list):
        raise ValueError("taints must be a list of {key, value, effect}")
    fields["taints"] = tuple(_taint_from_mapping(t, i) for i, t in enumerate(taints))
    return NodePool(**fields)


def _taint_from_mapping(item: object, index: int) -> Taint:
    if not isinstance(item, Mapping) or set(item) - set(_TAINT_FIELDS) or "key" not in item:
        raise ValueError(f"taints[{index}] must be a mapping with key, value, effect")
    return Taint(key=item["key"], value=item.get("value", ""), effect=item.get("effect", "NoSchedule"))


# Where a cloud cluster goes when neither --region nor --zone is given: a zone for GKE (a zonal
# cluster, one control plane and no per-zone node multiplication), a region for EKS and AKS.
DEFAULT_LOCATION: dict[str, tuple[str, str]] = {
    "gke": ("zone", "us-central1-a"),
    "eks": ("region", "us-west-2"),
    "aks": ("region", "eastus"),
}


def build_cluster(
    provider: str,
    *,
    name: str = "surreal",
    pools: tuple[NodePool, ...] | None = None,
    region: str | None = None,
    zone: str | None = None,
    project: str | None = None,
    resource_group: str | None = None,
) -> ClusterPlan:
    """The cluster plan `surreal provision` builds from its flags: `pools` (a pools file's) or the
    provider's defaults, and the provider's default location when neither region nor zone is set.
    Raises ValueError naming the bad flag or field."""
    pools = pools if pools is not None else default_pools(provider)
    if region is None and zone is None and provider in DEFAULT_LOCATION:
        key, value = DEFAULT_LOCATION[provider]
        region, zone = (value, None) if key == "region" else (None, value)
    return ClusterPlan(name=name, provider=provider, pools=pools, region=region, zone=zone,
                       project=project, resource_group=resource_group)  # fmt: skip

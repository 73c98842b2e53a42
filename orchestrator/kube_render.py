"""The Kubernetes objects of an experiment, rendered from its program. Pure: no cluster, no I/O.

`render(spec, placement, token=...)` turns `make_program(spec)` into plain dicts (the API's JSON):
ConfigMap (the spec; the root that owns every other object once applied), Secret (the token),
NetworkPolicy, learner Service + StatefulSet, actor Deployment, evaluator Deployment, TensorBoard
Service + Deployment. Every container runs its component's argv with exactly its env, so a pod
cannot tell it is not a local subprocess. `surreal create --backend kube --dry-run -o yaml` prints
them (kube_output), the kube launcher applies them, and helm/surreal renders the same objects.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from surreal.orchestrator import kube_pods as pods
from surreal.orchestrator.components import Component, Program
from surreal.orchestrator.kube_pods import Placement
from surreal.orchestrator.program import ENV_POD_NAME, LEARNER_PORT, Target, make_program, pod_split
from surreal.spec import ExperimentSpec

__all__ = [
    "DEFAULT_IMAGE",
    "Placement",
    "RenderError",
    "RenderSettings",
    "kube_program",
    "labels",
    "new_token",
    "object_names",
    "render",
]

# Used when the spec names no image: what `make image` builds and `make kind-load` loads.
DEFAULT_IMAGE = "surreal:local"
MANAGED_BY = "surreal"
ROLES = ("learner", "actor", "evaluator", "tensorboard")
# TensorBoard is not a program component (it runs no surreal code), so its size is set here.
TENSORBOARD_RESOURCES = {"cpu": "250m", "memory": "512Mi"}


class RenderError(ValueError):
    """A spec that cannot become Kubernetes objects; the message names the problem."""


@dataclass(frozen=True)
class RenderSettings:
    """Cluster-side choices that are not part of the experiment spec (Helm values mirror them)."""

    # "pvc": a PersistentVolumeClaim per learner, so checkpoints survive a rescheduled pod and
    # TensorBoard can read the events; "emptyDir": storage that dies with the pod, no TensorBoard
    # (for clusters without a default StorageClass).
    storage: str = "pvc"
    # Size of the learner's claim (a Kubernetes quantity).
    storage_size: str = "2Gi"
    # StorageClass of the claim; "" uses the cluster's default class.
    storage_class: str = ""
    # imagePullPolicy of every container; IfNotPresent also works for images loaded into kind.
    image_pull_policy: str = "IfNotPresent"
    # Per-role resource overrides, e.g. {"actor": {"requests": {...}, "limits": {...}}}; roles not
    # named keep the program's sizes (requests = limits).
    resources: Mapping[str, Mapping[str, Mapping[str, str]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.storage not in ("pvc", "emptyDir"):
            raise RenderError(f"storage must be 'pvc' or 'emptyDir', got {self.storage!r}")
        unknown = set(self.resources) - set(ROLES)
        if unknown:
            raise RenderError(f"resources for unknown roles {sorted(unknown)} (roles: {ROLES})")


def object_names(name: str) -> dict[str, str]:
    """Object name per part of experiment `name` (the learner's Service shares its name)."""
    return {
        "spec": f"{name}-spec",
        "token": f"{name}-token",
        "learner": f"{name}-learner",
        "actor": f"{name}-actor",
        "evaluator": f"{name}-evaluator",
        "tensorboard": f"{name}-tensorboard",
        "claim": f"data-{name}-learner-0",  # the StatefulSet's claim for its pod 0
    }


def labels(name: str, component: str, managed_by: str = MANAGED_BY) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "surreal",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": managed_by,
        "surreal.io/experiment": name,
        "surreal.io/component": component,
    }


def selector(name: str, component: str) -> dict[str, str]:
    return {"surreal.io/experiment": name, "surreal.io/component": component}


def new_token() -> str:
    return secrets.token_urlsafe(32)


def kube_spec(spec: ExperimentSpec) -> ExperimentSpec:
    """The spec as the pods see it: backend kube and the image that actually runs."""
    return dataclasses.replace(spec, backend="kube", image=spec.image or DEFAULT_IMAGE)


def kube_target(spec: ExperimentSpec) -> Target:
    return Target(
        spec_path=pods.SPEC_PATH,
        # The Service's short name: every pod of the experiment lives in its namespace.
        learner_addr=f"{object_names(spec.name)['learner']}:{LEARNER_PORT}",
        bind_host="0.0.0.0",
        exp_dir=pods.EXP_DIR,
        command=("surreal",),
        token_file=pods.TOKEN_PATH,  # the mounted Secret, as locally: never in argv or env
        linger=True,
    )


def check_capacity(spec: ExperimentSpec) -> None:
    if spec.agents % spec.agents_per_pod:
        below = spec.agents - spec.agents % spec.agents_per_pod
        hint = [str(n) for n in (below, below + spec.agents_per_pod) if n > 0]
        raise RenderError(
            f"agents ({spec.agents}) must be a multiple of agents_per_pod ({spec.agents_per_pod}) "
            f"on Kubernetes, where every actor pod hosts agents_per_pod agents "
            f"(use --agents {' or '.join(hint)})"
        )


def kube_program(spec: ExperimentSpec) -> Program:
    check_capacity(spec)
    return make_program(kube_spec(spec), kube_target(spec), pod_split(spec.agents, spec.agents_per_pod))


def render(
    spec: ExperimentSpec,
    placement: Mapping[str, Placement] | None = None,
    *,
    token: str,
    settings: RenderSettings | None = None,
) -> list[dict[str, Any]]:
    """Every object of the experiment, root (the ConfigMap) first, without ownerReferences (the
    root's uid exists only once it is created; the kube launcher adds them)."""
    if not token:
        raise RenderError("an empty token would let anyone reach the learner")
    settings = settings or RenderSettings()
    placement = dict(placement or {})
    unknown = set(placement) - set(ROLES)
    if unknown:
        raise RenderError(f"placement for unknown roles {sorted(unknown)} (roles: {ROLES})")
    spec = kube_spec(spec)
    program = kube_program(spec)
    ctx = _Ctx(spec, settings, placement)
    actors = [c for c in program.components if c.role == "actor"]
    _check_actors_alike(actors)
    objects = [
        ctx.config_map(),
        ctx.secret(token),
        ctx.network_policy(),
        ctx.service("learner", LEARNER_PORT, "grpc"),
        ctx.learner(program.component("learner")),
        ctx.deployment(actors[0], len(actors)),
        ctx.deployment(program.component("evaluator"), 1),
    ]
    if settings.storage == "pvc":  # TensorBoard reads the learner's claim
        objects += [ctx.service("tensorboard", pods.TB_PORT, "http"), ctx.tensorboard()]
    return objects


def _check_actors_alike(actors: list[Component]) -> None:
    # One pod template serves every actor worker; the program must not tell them apart by env.
    if len({(c.env, c.cpu, c.memory_mb) for c in actors}) != 1:
        raise RenderError("actor workers differ in env or size; one Deployment cannot run them")


@dataclass(frozen=True)
class _Ctx:
    spec: ExperimentSpec
    settings: RenderSettings
    placement: Mapping[str, Placement]

    @property
    def names(self) -> dict[str, str]:
        return object_names(self.spec.name)

    def meta(self, name: str, component: str) -> dict[str, Any]:
        return {
            "name": name,
            "namespace": self.spec.namespace,
            "labels": labels(self.spec.name, component),
        }

    def config_map(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": self.meta(self.names["spec"], "spec"),
            "data": {"spec.yaml": self.spec.to_yaml()},
        }

    def secret(self, token: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": self.meta(self.names["token"], "token"),
            "type": "Opaque",
            "stringData": {"token": token},
        }

    def network_policy(self) -> dict[str, Any]:
        name = self.spec.name
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": self.meta(self.names["learner"], "learner"),
            "spec": {
                "podSelector": {"matchLabels": selector(name, "learner")},
                "policyTypes": ["Ingress"],
                # Only this experiment's pods, in this namespace, reach the learner's port.
                "ingress": [
                    {
                        "from": [{"podSelector": {"matchLabels": {"surreal.io/experiment": name}}}],
                        "ports": [{"protocol": "TCP", "port": LEARNER_PORT}],
                    }
                ],
            },
        }

    def service(self, role: str, port: int, port_name: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": self.meta(self.names[role], role),
            "spec": {
                "type": "ClusterIP",
                "selector": selector(self.spec.name, role),
                "ports": [{"name": port_name, "port": port, "targetPort": port_name, "protocol": "TCP"}],
            },
        }

    def placement_of(self, role: str) -> Placement:
        return self.placement.get(role, Placement())

    def gpus(self, role: str) -> int:
        default = self.spec.gpu if role == "learner" else 0
        return self.placement_of(role).gpu or default

    def resources(self, component: Component) -> dict[str, dict[str, str]]:
        base = self.settings.resources.get(component.role) or pods.default_resources(component)
        return pods.with_gpu(base, self.gpus(component.role))

    def pod_template(self, component: Component, exp_dir_volume: dict | None) -> dict[str, Any]:
        extra_env = []
        if component.role == "actor":
            pod_name = {"fieldRef": {"fieldPath": "metadata.name"}}
            extra_env.append({"name": ENV_POD_NAME, "valueFrom": pod_name})
        container = pods.component_container(
            component,
            self.spec.image,
            self.settings.image_pull_policy,
            self.resources(component),
            extra_env,
        )
        volumes = pods.component_volumes(self.names, exp_dir_volume)
        return {
            "metadata": {"labels": labels(self.spec.name, component.role)},
            "spec": pods.pod_spec([container], volumes, self.placement_of(component.role)),
        }

    def learner(self, component: Component) -> dict[str, Any]:
        pvc = self.settings.storage == "pvc"
        spec: dict[str, Any] = {
            "replicas": 1,
            "serviceName": self.names["learner"],
            "selector": {"matchLabels": selector(self.spec.name, "learner")},
            "template": self.pod_template(component, None if pvc else {"emptyDir": {}}),
        }
        if pvc:
            spec["volumeClaimTemplates"] = [self.claim_template()]
            # Deleting the experiment deletes its checkpoints too; scaling never happens.
            spec["persistentVolumeClaimRetentionPolicy"] = {
                "whenDeleted": "Delete",
                "whenScaled": "Retain",
            }
        return {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": self.meta(self.names["learner"], "learner"),
            "spec": spec,
        }

    def claim_template(self) -> dict[str, Any]:
        claim: dict[str, Any] = {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": self.settings.storage_size}},
        }
        if self.settings.storage_class:
            claim["storageClassName"] = self.settings.storage_class
        return {
            "metadata": {"name": "data", "labels": labels(self.spec.name, "learner")},
            "spec": claim,
        }

    def deployment(self, component: Component, replicas: int) -> dict[str, Any]:
        role = component.role
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": self.meta(self.names[role], role),
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": selector(self.spec.name, role)},
                # Actors and the evaluator keep nothing: their exp dir is scratch space.
                "template": self.pod_template(component, {"emptyDir": {}}),
            },
        }

    def tensorboard(self) -> dict[str, Any]:
        learner = self.placement_of("learner")
        resources = self.settings.resources.get("tensorboard") or {
            "requests": dict(TENSORBOARD_RESOURCES),
            "limits": dict(TENSORBOARD_RESOURCES),
        }
        container = pods.tensorboard_container(self.spec.image, self.settings.image_pull_policy, resources)
        volumes = [
            {"name": "tmp", "emptyDir": {}},
            # ReadWriteOnce means one node, not one pod: sharing the learner's node lets this pod
            # mount the learner's claim read-only, on kind, minikube and clouds alike.
            {
                "name": "data",
                "persistentVolumeClaim": {"claimName": self.names["claim"], "readOnly": True},
            },
        ]
        same_node = {
            "labelSelector": {"matchLabels": selector(self.spec.name, "learner")},
            "topologyKey": "kubernetes.io/hostname",
        }
        affinity = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [same_node]}}
        # The learner's node may be a tainted GPU node: tolerate what the learner tolerates.
        placement = Placement(learner.node_selector, learner.tolerations)
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": self.meta(self.names["tensorboard"], "tensorboard"),
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": selector(self.spec.name, "tensorboard")},
                "template": {
                    "metadata": {"labels": labels(self.spec.name, "tensorboard")},
                    "spec": pods.pod_spec([container], volumes, placement, affinity),
                },
            },
        }

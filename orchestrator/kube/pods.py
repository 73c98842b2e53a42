"""Pod templates of an experiment: containers, volumes, probes, security and placement. Pure.

`kube_render` assembles these into workload objects; the Helm chart's `_helpers.tpl` mirrors every
choice made here, and tests/kube compare the two object by object.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from surreal.orchestrator.program import Component
from surreal.provisioner.placement import Placement as Placement  # re-exported for the kube backend

# Paths inside every pod (the same in the chart).
SPEC_DIR = "/etc/surreal"
SPEC_PATH = f"{SPEC_DIR}/spec.yaml"
TOKEN_DIR = "/var/run/secrets/surreal"
TOKEN_PATH = f"{TOKEN_DIR}/token"
EXP_DIR = "/var/lib/surreal"
# The kubelet's file for a container's termination message (what kubectl shows once it ended).
TERMINATION_LOG = "/dev/termination-log"
TB_PORT = 6006
# The image's non-root user (Dockerfile: useradd --uid 10001).
RUN_AS = 10001
# Memory-backed /dev/shm: torch's shared-memory tensors need more than the runtime's 64 MiB default;
# it counts against the container's memory limit, so it is bounded.
SHM_SIZE = "256Mi"
GPU_RESOURCE = "nvidia.com/gpu"
# Placement comes from the provisioner's node pools (nodeSelector, tolerations, GPUs per role); a
# Placement's gpu of 0 means "the spec's": spec.gpu for the learner, none for other roles.


def cpu_quantity(cores: float) -> str:
    """Kubernetes CPU quantity: whole cores as "2", fractions in millicores ("500m")."""
    millis = round(cores * 1000)
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def default_resources(component: Component) -> dict[str, dict[str, str]]:
    """Requests = limits (Guaranteed QoS: an RL worker is steady, and no surprise eviction), but for
    a CPU limit above the request: an actor asks for the share the learner needs and may use a
    core the node has spare (Burstable; its memory still requests = limits)."""
    amount = {"cpu": cpu_quantity(component.cpu), "memory": f"{component.memory_mb}Mi"}
    limit = {**amount, "cpu": cpu_quantity(component.cpu_limit or component.cpu)}
    return {"requests": amount, "limits": limit}


def with_gpu(resources: Mapping[str, Mapping[str, str]], gpus: int) -> dict[str, dict[str, str]]:
    out = {kind: dict(amounts) for kind, amounts in resources.items()}
    if gpus > 0:
        # Extended resources cannot be overcommitted: requests must equal limits.
        for kind in ("requests", "limits"):
            out.setdefault(kind, {})[GPU_RESOURCE] = str(gpus)
    return out


def container_security() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "runAsGroup": RUN_AS,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_security() -> dict[str, Any]:
    # fsGroup makes the checkpoint volume and the mounted token readable/writable by the user.
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "runAsGroup": RUN_AS,
        "fsGroup": RUN_AS,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def rank_ports(ports: Sequence[int]) -> dict[str, int]:
    """Port name -> port of each learner rank: "grpc" for rank 0 (the probes' and the one a single
    learner has), "grpc-R" for rank R."""
    return {("grpc" if rank == 0 else f"grpc-{rank}"): port for rank, port in enumerate(ports)}


def grpc_probes(port: int) -> dict[str, Any]:
    """The learner serves grpc.health.v1 without auth. Startup allows for importing torch and
    loading a checkpoint; liveness is lenient because a long update holds the GIL."""

    def probe(period: int, timeout: int, failures: int) -> dict[str, Any]:
        return {
            "grpc": {"port": port},
            "periodSeconds": period,
            "timeoutSeconds": timeout,
            "failureThreshold": failures,
        }

    return {
        "startupProbe": probe(5, 5, 60),
        "readinessProbe": probe(5, 5, 3),
        "livenessProbe": probe(20, 10, 6),
    }


def component_volumes(names: Mapping[str, str], exp_dir_volume: dict[str, Any]) -> list[dict[str, Any]]:
    """Volumes of a component pod; `exp_dir_volume` is its exp dir (a claim, or an emptyDir)."""
    return [
        {"name": "spec", "configMap": {"name": names["spec"]}},
        {"name": "token", "secret": {"secretName": names["token"], "defaultMode": 0o440}},
        {"name": "tmp", "emptyDir": {}},
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_SIZE}},
        {"name": "data", **exp_dir_volume},
    ]


def component_container(
    component: Component,
    image: str,
    pull_policy: str,
    resources: Mapping[str, Mapping[str, str]],
    ports: Sequence[int] = (),
) -> dict[str, Any]:
    """The container that runs `component.argv` with exactly `component.env`; it listens on
    `ports` (a learner's ranks), or on `component.port`. The probes ask the first port: rank 0's
    server is up once the group has formed (every rank restores rank 0's checkpoint first)."""
    container: dict[str, Any] = {
        "name": component.role,
        "image": image,
        "imagePullPolicy": pull_policy,
        # command + args = the argv, whatever ENTRYPOINT the image has (e.g. a CUDA base's).
        "command": list(component.argv[:1]),
        "args": list(component.argv[1:]),
        "env": [{"name": k, "value": v} for k, v in sorted(component.env.items())],
    }
    ports = tuple(ports) or ((component.port,) if component.port is not None else ())
    if ports:
        container["ports"] = [{"name": name, "containerPort": port, "protocol": "TCP"}
                              for name, port in rank_ports(ports).items()]  # fmt: skip
        container.update(grpc_probes(ports[0]))
    container["resources"] = {kind: dict(v) for kind, v in resources.items()}
    container["securityContext"] = container_security()
    container["volumeMounts"] = [
        {"name": "spec", "mountPath": SPEC_DIR, "readOnly": True},
        {"name": "token", "mountPath": TOKEN_DIR, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "shm", "mountPath": "/dev/shm"},
        {"name": "data", "mountPath": EXP_DIR},
    ]
    # A learner's final status is written there (surreal.component); a crash writes nothing, and
    # then the message is the log's tail, which names the error: `kubectl get pod -o jsonpath`.
    container["terminationMessagePath"] = TERMINATION_LOG
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    return container


def pod_spec(
    containers: list[dict[str, Any]],
    volumes: list[dict[str, Any]],
    placement: Placement,
    affinity: dict[str, Any] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        # No service account token, unless the pod asks for its experiment's account: the
        # learner, actors and evaluator do, to watch their Jobs (render.pod_template, watch.py).
        "automountServiceAccountToken": False,
        # Service links would add variables for every Service in the namespace to the env.
        "enableServiceLinks": False,
        "securityContext": pod_security(),
        "containers": containers,
        "volumes": volumes,
    }
    if placement.node_selector:
        spec["nodeSelector"] = dict(placement.node_selector)
    if placement.tolerations:
        spec["tolerations"] = [dict(t) for t in placement.tolerations]
    if affinity:
        spec["affinity"] = affinity
    return spec


def tensorboard_container(image: str, pull_policy: str, resources: Mapping) -> dict[str, Any]:
    return {
        "name": "tensorboard",
        "image": image,
        "imagePullPolicy": pull_policy,
        "command": ["tensorboard"],
        "args": ["--logdir", f"{EXP_DIR}/tb", "--host", "0.0.0.0", "--port", str(TB_PORT)],
        "ports": [{"name": "http", "containerPort": TB_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 10},
        "resources": {kind: dict(v) for kind, v in resources.items()},
        "securityContext": container_security(),
        "volumeMounts": [
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "data", "mountPath": EXP_DIR, "readOnly": True},
        ],
    }

"""What an experiment's pods say, as `surreal status` and `surreal list` show it. Pure: works on the
API's JSON (dicts), so it is tested with hand-written pods.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from surreal.orchestrator.experiments import EXTRA_METRICS, METRIC_FIELDS
from surreal.orchestrator.kube_errors import KubeError

ROLE_ORDER = ("learner", "actor", "evaluator", "tensorboard")
# On the root ConfigMap: the agent count `surreal scale` last set (the spec keeps the created one).
AGENTS_ANNOTATION = "surreal.io/agents"
# Waiting reasons that need a person (a bad image, a crashing learner), not patience.
STUCK = ("CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "InvalidImageName",
         "CreateContainerConfigError", "CreateContainerError")  # fmt: skip


def role_of(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata", {}).get("labels") or {}).get("surreal.io/component", ""))


def _container(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    role = role_of(pod)
    return next((c for c in statuses if c.get("name") == role), statuses[0] if statuses else {})


def restarts(pod: Mapping[str, Any]) -> int:
    return int(_container(pod).get("restartCount") or 0)


def is_ready(pod: Mapping[str, Any]) -> bool:
    c = _container(pod)
    return bool(c.get("ready")) and "running" in (c.get("state") or {})


def pod_state(pod: Mapping[str, Any]) -> str:
    """One word for a pod: Running, Starting, Completed, Error(CODE), a waiting reason, ..."""
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return "Terminating"
    state = _container(pod).get("state") or {}
    if "waiting" in state:
        return str(state["waiting"].get("reason") or "Waiting")
    if "terminated" in state:
        code = state["terminated"].get("exitCode")
        return "Completed" if code == 0 else f"Error({code})"
    if "running" in state:
        return "Running" if is_ready(pod) else "Starting"
    return str((pod.get("status") or {}).get("phase") or "Pending")


def _exited_cleanly(pod: Mapping[str, Any]) -> bool:
    c = _container(pod)
    for key in ("state", "lastState"):
        if ((c.get(key) or {}).get("terminated") or {}).get("exitCode") == 0:
            return True
    return False


def phase(pods: Sequence[Mapping[str, Any]], metrics: Mapping[str, Any] | None = None) -> str:
    """Pending, Running, Succeeded (the learner reports the run done — it then serves status until
    deleted — or its container exited 0) or Failed (the learner is stuck)."""
    metrics = metrics or {}
    learners = [p for p in pods if role_of(p) == "learner"]
    if not learners:
        return "Pending"
    learner = learners[0]
    if metrics.get("done") or _exited_cleanly(learner):
        return "Succeeded"
    if pod_state(learner) in STUCK:
        return "Failed"
    return "Running" if is_ready(learner) else "Pending"


def _sorted(pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    def key(p: Mapping[str, Any]) -> tuple[int, str]:
        role = role_of(p)
        order = ROLE_ORDER.index(role) if role in ROLE_ORDER else len(ROLE_ORDER)
        return order, p["metadata"]["name"]

    return sorted(pods, key=key)


def components(pods: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "name": p["metadata"]["name"],
            "role": role_of(p),
            "state": pod_state(p),
            "ready": is_ready(p),
            "restarts": restarts(p),
        }
        for p in _sorted(pods)
    ]


def status(
    spec: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    metrics: Mapping[str, Any],
    learner_problem: str = "",
    backend: str = "kube",
) -> dict[str, Any]:
    """The contract's status object (docs: ARCHITECTURE §6) for the pods of an experiment (on
    Kubernetes, or run as containers)."""
    actors = [p for p in pods if role_of(p) == "actor"]
    out: dict[str, Any] = {
        "name": spec.get("name"),
        "algo": spec.get("algo"),
        "env": spec.get("env"),
        "backend": backend,
        "namespace": spec.get("namespace"),
        "agents": metrics.get("agents") or spec.get("agents"),  # the learner follows `scale`
        "target_steps": spec.get("steps"),
        "phase": phase(pods, metrics),
    }
    for key in METRIC_FIELDS:
        out[key] = metrics.get(key)
    for key in EXTRA_METRICS:
        if key in metrics:
            out[key] = metrics[key]
    out["learner_status"] = learner_problem or "ok"
    out["actor_pods"] = {"ready": sum(is_ready(p) for p in actors), "total": len(actors)}
    out["components"] = components(pods)
    return out


def list_row(root: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    spec = yaml.safe_load((root.get("data") or {}).get("spec.yaml") or "") or {}
    labels = root["metadata"].get("labels") or {}
    name = labels.get("surreal.io/experiment") or spec.get("name")
    mine = [p for p in pods if (p["metadata"].get("labels") or {}).get("surreal.io/experiment") == name]
    return {
        "name": name,
        "namespace": root["metadata"].get("namespace"),
        "algo": spec.get("algo"),
        "env": spec.get("env") or "",
        "agents": _scaled(root) or spec.get("agents"),
        "phase": phase(mine),
        "pods": len(mine),
        "managed_by": labels.get("app.kubernetes.io/managed-by"),
    }


def _scaled(root: Mapping[str, Any]) -> int | None:
    """The count `surreal scale` noted on the root (None if none, or not a number)."""
    value = str((root["metadata"].get("annotations") or {}).get(AGENTS_ANNOTATION) or "")
    return int(value) if value.isdigit() else None


def ready_pod(pods: Sequence[Mapping[str, Any]], role: str) -> str | None:
    for pod in _sorted(pods):
        if role_of(pod) == role and is_ready(pod):
            return str(pod["metadata"]["name"])
    return None


def pick_pod(pods: Sequence[Mapping[str, Any]], component: str, experiment: str) -> tuple[str, str]:
    """(pod, container) for `surreal logs`: a role (its first pod, running ones first), "actor-N"
    (the N-th actor pod by name, from 0) or a pod's name."""
    by_name = {p["metadata"]["name"]: p for p in pods}
    if component in by_name:
        return component, role_of(by_name[component])
    role, index = component, 0
    match = re.fullmatch(r"([a-z]+)-(\d+)", component)
    if match and match.group(1) in ROLE_ORDER:
        role, index = match.group(1), int(match.group(2))
    if role not in ROLE_ORDER:
        raise KubeError(
            f"no component {component!r} in experiment {experiment!r} "
            f"(use {', '.join(ROLE_ORDER)}, actor-N or a pod name)"
        )
    of_role = [p for p in _sorted(pods) if role_of(p) == role]
    if not match:  # a role: prefer a pod that runs, then any
        of_role.sort(key=lambda p: not is_ready(p))
    if index >= len(of_role):
        have = f"{len(of_role)} {role} pod(s)"
        raise KubeError(f"experiment {experiment!r} has {have}; no {component!r}")
    return of_role[index]["metadata"]["name"], role

"""What an experiment's pods say, as `surreal status` and `surreal list` show it. Pure: works on the
API's JSON (dicts), so it is tested with hand-written pods.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import yaml

from surreal.orchestrator.kube.errors import KubeError
from surreal.orchestrator.policy import RoleEnd, outcome, unfinished
from surreal.orchestrator.status import ComponentState, component, status_object
from surreal.provisioner.placement import ROLES as ROLE_ORDER
from surreal.runtime.exits import EXIT_PREEMPTED

# On the root ConfigMap: the agent count `surreal scale` last set (the spec keeps the created one).
AGENTS_ANNOTATION = "surreal.io/agents"
# On the root while `surreal scale` resizes a queued experiment: the agent count it is resized to.
RESIZE_ANNOTATION = "surreal.io/resize"
# Waiting reasons that need a person (a bad image, a crashing learner), not patience.
STUCK = ("CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "InvalidImageName",
         "CreateContainerConfigError", "CreateContainerError")  # fmt: skip


def role_of(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata", {}).get("labels") or {}).get("surreal.io/component", ""))


def _container(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    role = role_of(pod)
    return next((c for c in statuses if c.get("name") == role), statuses[0] if statuses else {})


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


def component_state(pod: Mapping[str, Any]) -> tuple[ComponentState, str]:
    """A pod in the contract's words: its ComponentState and the detail Kubernetes gives (an exit
    code, a waiting reason) or ""."""
    word = pod_state(pod)
    if word == "Terminating":
        return ComponentState.RUNNING, "terminating"
    if word == "Completed":
        return ComponentState.SUCCEEDED, ""
    if word.startswith("Error("):
        code = word[len("Error(") : -1]
        if code == str(EXIT_PREEMPTED):
            return ComponentState.STOPPED, f"exit code {code} (preempted after a checkpoint)"
        return ComponentState.FAILED, f"exit code {code}"
    if word == "CrashLoopBackOff":
        return ComponentState.RESTARTING, word
    if word in ("ContainerCreating", "PodInitializing", "Starting"):
        return ComponentState.STARTING, "" if word == "Starting" else word
    if word == "Running":
        return ComponentState.RUNNING, ""
    return ComponentState.PENDING, "" if word == "Pending" else word


def _exited_cleanly(pod: Mapping[str, Any]) -> bool:
    c = _container(pod)
    for key in ("state", "lastState"):
        if ((c.get(key) or {}).get("terminated") or {}).get("exitCode") == 0:
            return True
    return False


def condition(job: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """The Job's condition `kind` (Complete, Failed, Suspended, ...) when it is True."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return cond
    return None


def job_state(job: Mapping[str, Any]) -> str:
    """A Job's or a JobSet's state: Complete, Failed, Suspended (queued: Kueue has not admitted it,
    or took it back) or Active."""
    if any(condition(job, kind) for kind in ("Complete", "SuccessCriteriaMet", "Completed")):
        return "Complete"
    if condition(job, "Failed") or condition(job, "FailureTarget"):
        return "Failed"
    if (job.get("spec") or {}).get("suspend"):
        return "Suspended"
    return "Active"


def admission(
    jobset: Mapping[str, Any] | None, workloads: Sequence[Mapping[str, Any]], resizing: str | None
) -> str | None:
    """Where a queued experiment is with Kueue: "Suspended for resize to N agents" (`surreal scale`
    is at work), "Queued" (waiting for admission), "Admitted", "Suspended" (its Workload
    deactivated, or Kueue took it back), "Finished"; None without a JobSet."""
    if resizing:
        return f"Suspended for resize to {resizing} agents"
    if jobset is None:
        return None
    if job_state(jobset) in ("Complete", "Failed"):
        return "Finished"
    workload = workloads[0] if workloads else None
    if workload is not None and (workload.get("spec") or {}).get("active") is False:
        return "Suspended"
    if workload is not None and condition(workload, "Admitted"):
        return "Admitted"
    if job_state(jobset) == "Suspended":
        return "Suspended" if workload is not None and condition(workload, "Evicted") else "Queued"
    return "Admitted"


def jobs_summary(jobs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per Job: what `kubectl get jobs` shows, and why a failed one failed."""
    rows = []
    for job in sorted(jobs, key=lambda j: _order(role_of(j))):
        st, spec = job.get("status") or {}, job.get("spec") or {}
        row: dict[str, Any] = {
            "name": job["metadata"]["name"],
            "role": role_of(job),
            "state": job_state(job),
            "completions": f"{st.get('succeeded') or 0}/{spec.get('completions', 1)}",
            "active": st.get("active") or 0,
            "failed": st.get("failed") or 0,  # crashed pods; disruptions are not counted
        }
        failed = condition(job, "Failed") or condition(job, "FailureTarget")
        if failed:
            row["reason"] = f"{failed.get('reason', '')}: {failed.get('message', '')}".strip(": ")
        rows.append(row)
    return rows


def _learner_messages(pods: Sequence[Mapping[str, Any]]) -> list[tuple[bool, str, dict[str, Any]]]:
    """(Succeeded?, finishedAt, message) of each ended learner's termination message (surreal.component)."""
    found: list[tuple[bool, str, dict[str, Any]]] = []
    for pod in pods:
        if role_of(pod) != "learner":
            continue
        term = (_container(pod).get("state") or {}).get("terminated") or {}
        try:
            message = json.loads(term.get("message") or "")
        except ValueError:
            continue
        if isinstance(message, dict):
            found.append((message.get("phase") == "Succeeded", str(term.get("finishedAt") or ""), message))
    return found


def final_metrics(pods: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The final status of a run whose learner pod is gone, from the ended learners' termination
    messages: the last Succeeded one, else the newest."""
    found = _learner_messages(pods)
    return max(found, key=lambda f: f[:2])[2] if found else {}


def _peer(obj: Mapping[str, Any]) -> bool:
    """A learner pod past the first (--learner-pods): it ends in silence by design."""
    return "-learner-peers" in obj["metadata"]["name"]


def learner_ended_early(pods: Sequence[Mapping[str, Any]]) -> str | None:
    """Why a learner that exited 0 has not succeeded (policy.unfinished): a learner pod exited 0
    without the termination message that a finished learner leaves (surreal.component writes it at
    every clean end; a learner pod past the first leaves none, its first pod's speaks for the run),
    and none left one that says Succeeded. None otherwise, also when its pods are gone."""
    if any(ok for ok, _, _ in _learner_messages(pods)):
        return None

    def silent_exit(pod: Mapping[str, Any]) -> bool:
        ended = (_container(pod).get("state") or {}).get("terminated") or {}
        return ended.get("exitCode") == 0 and not ended.get("message")

    silent = [p for p in pods if role_of(p) == "learner" and not _peer(p) and silent_exit(p)]
    return unfinished({}) if silent else None


def learner_failure(pods: Sequence[Mapping[str, Any]]) -> str | None:
    """Why the learner failed for good, as it said in its termination message (a fatal exit:
    e.g. the rank that never joined its group), or None."""
    failed = [f for f in _learner_messages(pods) if f[2].get("phase") == "Failed" and f[2].get("reason")]
    return f"learner: {max(failed, key=lambda f: f[1])[2]['reason']}" if failed else None


def phase(
    pods: Sequence[Mapping[str, Any]],
    metrics: Mapping[str, Any] | None = None,
    jobs: Sequence[Mapping[str, Any]] = (),
    jobset: Mapping[str, Any] | None = None,
) -> str:
    """Pending (also: queued), Running, Succeeded (the learner's Job completed, the learner
    reports the run done, or its container exited 0) or Failed (its Job failed: past its retries,
    or its workers' learner gone; or the learner is stuck)."""
    metrics = metrics or {}
    if jobset is not None:  # a queued experiment: its JobSet ends it, and holds it while suspended
        state = job_state(jobset)
        if state in ("Complete", "Failed"):
            return "Succeeded" if state == "Complete" else "Failed"
        if state == "Suspended":
            return "Pending"
    ended, _ = outcome([*role_ends(jobs, pods=pods), *learner_pod_ends(pods, metrics)])
    if ended is not None:
        return ended.value
    learners = [p for p in pods if role_of(p) == "learner"]
    if not learners or any(job_state(j) == "Suspended" for j in jobs if role_of(j) == "learner"):
        return "Pending"
    return "Running" if any(is_ready(p) for p in learners) else "Pending"


def learner_pod_ends(pods: Sequence[Mapping[str, Any]], metrics: Mapping[str, Any]) -> list[RoleEnd]:
    """What the learner's pods and status say before its Job does, as policy.outcome takes it:
    done once it reports the run done or a pod of it exited 0; failed when it exited 0 before its
    run was done (learner_ended_early) or, not done, its live pod is stuck (STUCK: a crash loop, an
    image it cannot pull)."""
    learners = [p for p in pods if role_of(p) == "learner"]
    done = bool(metrics.get("done")) or any(_exited_cleanly(p) for p in learners)
    live = [p for p in learners if "terminated" not in (_container(p).get("state") or {})]
    pod = live[0] if live else (learners[0] if learners else None)
    why = learner_ended_early(pods) or ""
    if not why and not done and pod is not None and pod_state(pod) in STUCK:
        why = f"its pod {pod['metadata']['name']} is {pod_state(pod)}"
    if not why:
        return [RoleEnd("learner", done=True)] if done else []
    return [RoleEnd("learner", failed=(pod["metadata"]["name"] if pod else "learner",), why=why)]


def role_ends(
    jobs: Sequence[Mapping[str, Any]],
    failure: Callable[[str], str] = lambda role: "",
    pods: Sequence[Mapping[str, Any]] = (),
) -> list[RoleEnd]:
    """The Jobs' roles as policy.outcome takes them, a Job as one worker (Kubernetes has applied the
    role's policy to its pods); `failure(role)` says why a Failed one failed."""
    ends = []
    for job in jobs:
        role, state = role_of(job), job_state(job)
        failed = (job["metadata"]["name"],) if state == "Failed" else ()
        why = failure(role) if failed else ""
        if (
            role == "learner"
            and state == "Complete"
            and not _peer(job)
            and (early := learner_ended_early(pods))
        ):
            failed, why = (job["metadata"]["name"],), early  # its Job completed, its run did not
        ends.append(RoleEnd(role, done=state == "Complete" and not failed, failed=failed, why=why))
    return ends


def _order(role: str) -> int:
    return ROLE_ORDER.index(role) if role in ROLE_ORDER else len(ROLE_ORDER)


def _sorted(pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return sorted(pods, key=lambda p: (_order(role_of(p)), p["metadata"]["name"]))


def components(pods: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for pod in _sorted(pods):
        state, detail = component_state(pod)
        restarts = int(_container(pod).get("restartCount") or 0)
        rows.append(component(pod["metadata"]["name"], role_of(pod), state, restarts, detail))
    return rows


def status(
    spec: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    metrics: Mapping[str, Any],
    learner_problem: str = "",
    backend: str = "kube",
    jobs: Sequence[Mapping[str, Any]] = (),
    jobset: Mapping[str, Any] | None = None,
    admission: str | None = None,
) -> dict[str, Any]:
    """The status contract's object (status.py) for the pods and Jobs of an experiment (on
    Kubernetes, or run as containers). Without the learner's answer (its pod has ended), the
    metrics are its termination message's."""
    metrics = metrics or final_metrics(pods)
    actors = [p for p in pods if role_of(p) == "actor"]
    rows = jobs_summary(jobs) if jobs else None
    problems = [f"{j['name']}: {j['reason']}" for j in rows or [] if j.get("reason")]
    problems += filter(None, [learner_failure(pods), learner_ended_early(pods)])
    queued = any(j["state"] == "Suspended" for j in rows or [])
    queued = queued or (jobset is not None and job_state(jobset) == "Suspended")
    return status_object(
        spec,
        backend=backend,
        phase=phase(pods, metrics, jobs, jobset),
        metrics=metrics,
        components=components(pods),
        namespace=spec.get("namespace"),
        learner_status=learner_problem or "ok",
        actor_pods={"ready": sum(is_ready(p) for p in actors), "total": len(actors)},
        jobs=rows,
        problem="; ".join(problems) or None,
        queued=(spec.get("queue") or True) if queued else None,  # waiting for admission (Kueue)
        admission=admission,
    )


def list_row(
    root: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], jobs: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    spec = yaml.safe_load((root.get("data") or {}).get("spec.yaml") or "") or {}
    labels = root["metadata"].get("labels") or {}
    name = labels.get("surreal.io/experiment") or spec.get("name")
    mine = [p for p in pods if (p["metadata"].get("labels") or {}).get("surreal.io/experiment") == name]
    my_jobs = [j for j in jobs if (j["metadata"].get("labels") or {}).get("surreal.io/experiment") == name]
    return {
        "name": name,
        "namespace": root["metadata"].get("namespace"),
        "algo": spec.get("algo"),
        "env": spec.get("env") or "",
        "agents": _scaled(root) or spec.get("agents"),
        "phase": phase(mine, final_metrics(mine), my_jobs),
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

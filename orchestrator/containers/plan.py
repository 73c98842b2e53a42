"""An experiment's rendered Kubernetes objects as the containers a cluster would run. Pure.

`translate(objects)` turns every pod the objects describe into one `podman run` (or `docker run`)
on a private network where the Services' names resolve; a Job's failure policy becomes a `JobRun`
that the run's Job controller (jobs.py) applies. run.py starts the plan.

Why not `podman kube play`: podman 4.3 plays Pods, Deployments and PersistentVolumeClaims only: no
Job, Secret or Service, and a Deployment gets one replica whatever it asks. What the translation
cannot run faithfully (several containers in a pod, GPUs, other env sources) it refuses by name.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from surreal.orchestrator.launcher import LauncherError
from surreal.orchestrator.program import ENV_JOB_INDEX, ENV_JOBS_WATCH

RUN_LABEL = "surreal.io/run"  # every container and network of one run (a run id)
POD_LABEL = "surreal.io/pod"  # the pod a container stands for
WORKLOADS = ("Job", "Deployment")
# Objects that have nothing to run here; what they promise is kept another way (see `translate`):
# a claim is a folder that outlives the pods; one node has nothing to drain.
PASSIVE = (
    "ConfigMap",
    "Secret",
    "Service",
    "NetworkPolicy",
    "PersistentVolumeClaim",
    "PodDisruptionBudget",
    "ServiceAccount",
    "Role",
    "RoleBinding",
)
# There is no API server here: the pods' access to it (their account's token, its Role) and their
# watch of their Jobs (ENV_JOBS_WATCH) are dropped; the run's Job controller (jobs.py) ends
# the components a failed role leaves without work, as the watch does on a cluster.
DEFAULT_GRACE_SECONDS = 30  # a pod's terminationGracePeriodSeconds when it sets none


class ContainersError(LauncherError):
    """One line that says what is wrong; whatever the operation had made is already removed."""


# --- translation: objects -> containers (pure) ----------------------------------------------------


@dataclass(frozen=True)
class HostPath:
    """A folder or file the harness makes on the host before the containers start."""

    path: Path
    mode: int
    gid: int = 0
    files: Mapping[str, str] = field(default_factory=dict)  # name -> text; empty for a folder


@dataclass(frozen=True)
class PodRun:
    """One pod: one container, as `ENGINE run ARGS IMAGE CMD...` starts it."""

    name: str
    role: str
    workload: str
    image: str
    args: tuple[str, ...]  # engine flags, before the image
    command: tuple[str, ...]  # after the image (the entrypoint is in args)
    probes: Mapping[str, Any]
    paths: tuple[HostPath, ...]
    index: int = 0  # a Job's completion index (a Deployment's replica number)
    grace_seconds: int = DEFAULT_GRACE_SECONDS  # SIGTERM -> SIGKILL when it is stopped
    termination_log: str = ""  # the host file of its termination message ("" for none)


@dataclass(frozen=True)
class JobRun:
    """What the Job controller needs of a Job: how many indexes, and its failure policy."""

    name: str
    role: str
    completions: int
    backoff_limit: int | None  # failed pods of the whole Job before it fails
    backoff_per_index: int | None  # failed pods of one index before that index fails
    ignore_exit_codes: tuple[int, ...]  # podFailurePolicy Ignore: replaced, not counted
    fail_exit_codes: tuple[int, ...]  # podFailurePolicy FailJob: the Job fails at once


@dataclass(frozen=True)
class Plan:
    run_id: str
    network: str
    experiment: str
    spec: Mapping[str, Any]
    pods: tuple[PodRun, ...]
    workdir: Path
    jobs: tuple[JobRun, ...] = ()
    # The objects translated (replacement pods and `scale` translate them again).
    objects: tuple[Mapping[str, Any], ...] = ()


def quantity_mib(value: str) -> int:
    """A memory quantity in MiB, for `--memory`."""
    units = {
        "Ki": 1 / 1024,
        "Mi": 1,
        "Gi": 1024,
        "Ti": 1024**2,
        "k": 1000 / 2**20,
        "M": 1e6 / 2**20,
        "G": 1e9 / 2**20,
    }
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]i?|k)?", str(value))
    if not m:
        raise ContainersError(f"memory quantity {value!r} is not understood")
    number, unit = float(m.group(1)), m.group(2)
    return max(1, round(number * units[unit] if unit else number / 2**20))


def quantity_cpus(value: str) -> str:
    text = str(value)
    cores = int(text[:-1]) / 1000 if text.endswith("m") else float(text)
    return f"{cores:g}"


def pod_name(workload: Mapping[str, Any], ordinal: int, rng: Callable[[int], str]) -> str:
    """Indexed Job pods are NAME-INDEX-<5 random>; Deployment pods NAME-<template hash>-<5 random>."""
    name = workload["metadata"]["name"]
    if workload["kind"] == "Job":
        return f"{name}-{ordinal}-{rng(5)}"
    template = json.dumps(workload["spec"]["template"], sort_keys=True).encode()
    return f"{name}-{hashlib.sha256(template).hexdigest()[:10]}-{rng(5)}"


def job_run(job: Mapping[str, Any]) -> JobRun:
    """A Job's completions and failure policy; refuses what the job controller here cannot do."""
    spec, name = job["spec"], job["metadata"]["name"]
    if spec.get("completionMode") != "Indexed" or spec.get("parallelism", 1) != spec.get("completions", 1):
        raise ContainersError(f"Job {name}: only Indexed Jobs that run every index at once are supported")
    ignore: list[int] = []
    fail: list[int] = []
    for rule in (spec.get("podFailurePolicy") or {}).get("rules") or []:
        codes = rule.get("onExitCodes")
        if codes is None:
            continue  # pod conditions (DisruptionTarget): no node here is drained or preempted
        if codes.get("operator") != "In" or rule["action"] not in ("Ignore", "FailJob"):
            raise ContainersError(f"Job {name}: podFailurePolicy rule {rule} is not supported")
        (ignore if rule["action"] == "Ignore" else fail).extend(int(c) for c in codes["values"])
    per_index = spec.get("backoffLimitPerIndex")
    return JobRun(
        name=name,
        role=str((job["metadata"].get("labels") or {}).get("surreal.io/component", "")),
        completions=int(spec.get("completions", 1)),
        backoff_limit=None if per_index is not None else int(spec.get("backoffLimit", 6)),
        backoff_per_index=None if per_index is None else int(per_index),
        ignore_exit_codes=tuple(ignore),
        fail_exit_codes=tuple(fail),
    )


def _random_suffix(n: int) -> str:
    alphabet = "bcdfghjklmnpqrstvwxz2456789"  # as Kubernetes: no vowels, no look-alikes
    return "".join(secrets.choice(alphabet) for _ in range(n))


def env_flags(container: Mapping[str, Any], pod: str, namespace: str) -> list[str]:
    fields = {"metadata.name": pod, "metadata.namespace": namespace}
    out: list[str] = []
    for var in container.get("env") or []:
        if var["name"] == ENV_JOBS_WATCH:
            continue
        if "value" in var:
            value = str(var["value"])
        else:
            path = ((var.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            if path not in fields:
                raise ContainersError(
                    f"env {var['name']}: only values and the downward API's "
                    f"{sorted(fields)} are supported, got {var.get('valueFrom')}"
                )
            value = fields[path]
        out += ["--env", f"{var['name']}={value}"]
    return out


def security_flags(pod_spec: Mapping[str, Any], container: Mapping[str, Any]) -> list[str]:
    """The pod's and container's securityContext; refuses root where runAsNonRoot asks otherwise."""
    pod_sec, sec = pod_spec.get("securityContext") or {}, container.get("securityContext") or {}
    user = sec.get("runAsUser", pod_sec.get("runAsUser"))
    group = sec.get("runAsGroup", pod_sec.get("runAsGroup"))
    if sec.get("runAsNonRoot", pod_sec.get("runAsNonRoot")) and (user is None or int(user) == 0):
        raise ContainersError(f"container {container['name']}: runAsNonRoot needs a non-zero runAsUser")
    flags: list[str] = []
    if user is not None:
        flags += ["--user", f"{user}:{group}" if group is not None else str(user)]
    if pod_sec.get("fsGroup") is not None:
        flags += ["--group-add", str(pod_sec["fsGroup"])]
    if sec.get("readOnlyRootFilesystem"):
        flags += ["--read-only"]
    for cap in (sec.get("capabilities") or {}).get("drop") or []:
        flags += ["--cap-drop", cap]
    for cap in (sec.get("capabilities") or {}).get("add") or []:
        flags += ["--cap-add", cap]
    if sec.get("allowPrivilegeEscalation") is False:
        flags += ["--security-opt", "no-new-privileges"]
    profile = (sec.get("seccompProfile") or pod_sec.get("seccompProfile") or {}).get("type")
    if profile not in (None, "RuntimeDefault"):  # RuntimeDefault is the engine's own profile
        raise ContainersError(f"container {container['name']}: seccomp profile {profile} is not supported")
    return flags


def resource_flags(container: Mapping[str, Any]) -> list[str]:
    """Limits become cgroup limits; requests only matter to a scheduler."""
    limits = (container.get("resources") or {}).get("limits") or {}
    flags: list[str] = []
    for key, value in limits.items():
        if key == "cpu":
            flags += ["--cpus", quantity_cpus(value)]
        elif key == "memory":
            flags += ["--memory", f"{quantity_mib(value)}m"]
        else:
            raise ContainersError(
                f"container {container['name']}: resource {key} is not supported here "
                "(GPUs need a real cluster: make e2e)"
            )
    return flags


def volume_flags(
    pod_spec: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    objects: Mapping[tuple[str, str], Mapping[str, Any]],
    poddir: Path,
    voldir: Path,
) -> tuple[list[str], list[HostPath]]:
    """Every volumeMount, from the pod's volumes. Claims live in `voldir` and outlive the pod,
    everything else lives in `poddir` and dies with it."""
    fs_group = int((pod_spec.get("securityContext") or {}).get("fsGroup") or 0)
    volumes = {v["name"]: v for v in pod_spec.get("volumes") or []}
    flags: list[str] = []
    paths: list[HostPath] = []
    for mount in container.get("volumeMounts") or []:
        name, target = mount["name"], mount["mountPath"]
        ro = bool(mount.get("readOnly"))
        vol = volumes.get(name, {})
        if "persistentVolumeClaim" in vol:
            claim = vol["persistentVolumeClaim"]["claimName"]
            ro = ro or bool(vol["persistentVolumeClaim"].get("readOnly"))
            # fsGroup: the volume's group is the pod's, setgid, group-writable.
            paths.append(HostPath(voldir / claim, 0o2775, fs_group))
            flags += ["--volume", f"{voldir / claim}:{target}:{'ro' if ro else 'rw'}"]
        elif "configMap" in vol or "secret" in vol:
            kind, ref = (
                ("ConfigMap", vol["configMap"]["name"])
                if "configMap" in vol
                else ("Secret", vol["secret"]["secretName"])
            )
            obj = objects.get((kind, ref))
            if obj is None:
                raise ContainersError(f"volume {name}: {kind} {ref} is not among the objects")
            data = dict(obj.get("data") or {}) if kind == "ConfigMap" else dict(obj.get("stringData") or {})
            mode = int(vol.get("secret", vol.get("configMap", {})).get("defaultMode", 0o644))
            host = poddir / name
            # A ConfigMap or Secret volume is read-only, its files owned by root and the fsGroup.
            paths.append(HostPath(host, mode, fs_group, data))
            flags += ["--volume", f"{host}:{target}:ro"]
        elif "emptyDir" in vol:
            empty = vol["emptyDir"] or {}
            if empty.get("medium") == "Memory":
                size = quantity_mib(empty.get("sizeLimit", "64Mi"))
                flags += [
                    "--mount",
                    f"type=tmpfs,destination={target},tmpfs-size={size * 2**20},tmpfs-mode=1777",
                ]
            else:
                paths.append(HostPath(poddir / name, 0o777))  # the kubelet makes emptyDirs 0777
                flags += ["--volume", f"{poddir / name}:{target}:{'ro' if ro else 'rw'}"]
        else:
            raise ContainersError(f"volume {name}: only configMap, secret, emptyDir and claims are supported")
    return flags, paths


def translate(
    objects: Sequence[Mapping[str, Any]],
    *,
    workdir: Path,
    run_id: str | None = None,
    rng: Callable[[int], str] = _random_suffix,
) -> Plan:
    """The containers that a cluster would run for `objects`. Services become network aliases of
    the pods they select; the network, which holds this experiment's pods only, keeps the
    NetworkPolicy; placement has one node to choose from."""
    run_id = run_id or _random_suffix(8)
    objects = expand_jobsets(objects)
    for obj in objects:
        if obj["kind"] not in (*WORKLOADS, *PASSIVE):
            raise ContainersError(f"{obj['kind']} {obj['metadata']['name']}: kind is not supported")
    config = next(
        (o for o in objects if o["kind"] == "ConfigMap" and "spec.yaml" in (o.get("data") or {})), None
    )
    if config is None:
        raise ContainersError("no ConfigMap holding spec.yaml: these are not a surreal experiment's objects")
    spec = yaml.safe_load(config["data"]["spec.yaml"])
    pods: list[PodRun] = []
    jobs: list[JobRun] = []
    for work in (o for o in objects if o["kind"] in WORKLOADS):
        if work["kind"] == "Job":
            jobs.append(job_run(work))
            count = jobs[-1].completions
        else:
            count = int(work["spec"].get("replicas", 1))
        pods += [_pod(objects, work, i, workdir=workdir, run_id=run_id, rng=rng) for i in range(count)]
    return Plan(
        run_id=run_id,
        network=f"surreal-{run_id}",
        experiment=str(spec.get("name")),
        spec=spec,
        pods=tuple(pods),
        workdir=workdir,
        jobs=tuple(jobs),
        objects=tuple(objects),
    )


def jobset_of(objects: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The experiment's JobSet (a queued experiment's), or None."""
    return next((o for o in objects if o["kind"] == "JobSet"), None)


def expand_jobsets(objects: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Each JobSet as the Jobs its controller makes, `S-R-i` (kube.render.job_names). Only an
    admitted JobSet is translated: a suspended one holds no pod."""
    out: list[Mapping[str, Any]] = []
    for obj in objects:
        if obj["kind"] != "JobSet":
            out.append(obj)
            continue
        meta = obj["metadata"]
        if obj["spec"].get("suspend"):
            raise ContainersError(f"JobSet {meta['name']} is suspended: it has no pod to run until admitted")
        for rjob in obj["spec"]["replicatedJobs"]:
            template = rjob["template"]
            for i in range(int(rjob.get("replicas", 1))):
                job_meta = {"name": f"{meta['name']}-{rjob['name']}-{i}", "namespace": meta.get("namespace"),
                            "labels": dict((template.get("metadata") or {}).get("labels") or {})}  # fmt: skip
                out.append({"apiVersion": "batch/v1", "kind": "Job", "metadata": job_meta,
                            "spec": template["spec"]})  # fmt: skip
    return out


def job_pod(plan: Plan, job: str, index: int, rng: Callable[[int], str] = _random_suffix) -> PodRun:
    """A new pod for index `index` of Job `job` (a failed one's replacement, or a new index)."""
    work = next((o for o in plan.objects if o["kind"] == "Job" and o["metadata"]["name"] == job), None)
    if work is None:
        raise ContainersError(f"no Job {job} among the run's objects")
    return _pod(plan.objects, work, index, workdir=plan.workdir, run_id=plan.run_id, rng=rng)


def _pod(
    objects: Sequence[Mapping[str, Any]],
    work: Mapping[str, Any],
    index: int,
    *,
    workdir: Path,
    run_id: str,
    rng: Callable[[int], str],
) -> PodRun:
    by_key = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    template, namespace = work["spec"]["template"], work["metadata"].get("namespace", "default")
    pod_labels = template["metadata"].get("labels") or {}
    selector = (work["spec"].get("selector") or {}).get("matchLabels") or {}  # a Job's is the API's
    if any(pod_labels.get(k) != v for k, v in selector.items()):
        where = f"{work['kind']} {work['metadata']['name']}"
        raise ContainersError(f"{where}: selector does not match its template")
    pod_spec = template["spec"]
    containers = pod_spec["containers"]
    if len(containers) != 1 or pod_spec.get("initContainers"):
        raise ContainersError(f"{work['metadata']['name']}: only pods of one container are supported")
    container = containers[0]
    policy = pod_spec.get("restartPolicy", "Always")
    aliases = [
        s["metadata"]["name"]
        for s in objects
        if s["kind"] == "Service"
        and all(pod_labels.get(k) == v for k, v in (s["spec"].get("selector") or {}).items())
    ]
    name = pod_name(work, index, rng)
    hostname = name
    subdomain = pod_spec.get("subdomain")
    headless = any(s["kind"] == "Service" and s["metadata"]["name"] == subdomain
                   and s["spec"].get("clusterIP") == "None" for s in objects)  # fmt: skip
    if work["kind"] == "Job" and subdomain and headless:
        # An Indexed Job's pod is named <job>-<index>, and resolves as <job>-<index>.<subdomain>
        # through the headless Service of that name (the learner pods' stable names).
        hostname = f"{work['metadata']['name']}-{index}"
        aliases += [hostname, f"{hostname}.{subdomain}"]
    poddir = workdir / "pods" / name
    vflags, paths = volume_flags(
        pod_spec, container, objects=by_key, poddir=poddir, voldir=workdir / "volumes"
    )
    command = list(container.get("command") or [])
    labels = {**pod_labels, RUN_LABEL: run_id, POD_LABEL: name}
    flags = [
        "--name", name, "--hostname", hostname, "--network", f"surreal-{run_id}",
        *(x for alias in aliases for x in ("--network-alias", alias)),
        *(x for k, v in sorted(labels.items()) for x in ("--label", f"{k}={v}")),
        "--restart", {"Always": "always", "OnFailure": "on-failure", "Never": "no"}[policy],
        *security_flags(pod_spec, container),
        *resource_flags(container),
        *env_flags(container, name, namespace),
        *vflags,
    ]  # fmt: skip
    if work["kind"] == "Job":  # what the Job controller gives each pod of an Indexed Job
        flags += ["--env", f"{ENV_JOB_INDEX}={index}"]
    termination_log = ""
    if container.get("terminationMessagePath"):
        # The kubelet's file for the termination message: a host file the harness reads back.
        termination_log = str(poddir / "termination-log")
        paths.append(HostPath(poddir, 0o666, files={"termination-log": ""}))
        flags += ["--volume", f"{termination_log}:{container['terminationMessagePath']}:rw"]
    if command:
        flags += ["--entrypoint", command[0]]
    probes = {k: container[k] for k in ("startupProbe", "readinessProbe", "livenessProbe") if k in container}
    return PodRun(
        name=name,
        role=str(pod_labels.get("surreal.io/component", "")),
        workload=work["metadata"]["name"],
        image=container["image"],
        args=tuple(flags),
        command=tuple([*command[1:], *(container.get("args") or [])]),
        probes={**probes, "_ports": {p.get("name"): p["containerPort"] for p in container.get("ports", [])}},
        paths=tuple(paths),
        index=index,
        grace_seconds=int(pod_spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)),
        termination_log=termination_log,
    )


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """A JSON-able dict; `plan_from_dict` inverts it (the containers backend keeps its runs so)."""
    data = dataclasses.asdict(plan)
    data["workdir"] = str(plan.workdir)
    for pod in data["pods"]:
        for host in pod["paths"]:
            host["path"] = str(host["path"])
    return data


def pod_from_dict(p: Mapping[str, Any]) -> PodRun:
    paths = tuple(HostPath(**{**h, "path": Path(h["path"])}) for h in p["paths"])
    return PodRun(**{**p, "args": tuple(p["args"]), "command": tuple(p["command"]), "paths": paths})


def plan_from_dict(data: Mapping[str, Any]) -> Plan:
    jobs = tuple(JobRun(**{**j, "ignore_exit_codes": tuple(j["ignore_exit_codes"]),
                           "fail_exit_codes": tuple(j["fail_exit_codes"])})
                 for j in data.get("jobs") or ())  # fmt: skip
    pods = tuple(pod_from_dict(p) for p in data["pods"])
    objects = tuple(data.get("objects") or ())
    return Plan(**{**data, "pods": pods, "jobs": jobs, "objects": objects, "workdir": Path(data["workdir"])})

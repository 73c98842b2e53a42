"""Run an experiment's rendered Kubernetes objects as real containers, as a cluster would.

`surreal create NAME --backend kube --dry-run -o yaml` gives the objects; this module turns every
pod they describe into one `podman run` (or `docker run`) that carries the pod's argv, env (the
downward API's pod name included), volumes (ConfigMap, Secret, emptyDir, the StatefulSet's claim),
securityContext, CPU and memory limits and restart policy, on a private network where the learner's
Service name resolves. It is the test harness of docs/kubernetes.md, "Try it without a cluster".

Why not `podman kube play`: podman 4.3 plays Pods, Deployments and PersistentVolumeClaims only: no
StatefulSet, Secret or Service, and a Deployment gets one replica whatever it asks. The translation
below is small, every mapping has a test (tests/containers/test_translate.py), and what it refuses
(several containers in one pod, GPUs, env sources other than values and the pod's own fields) it
refuses by name.

    python tests/containers/podkube.py up objects.yaml      # until the learner is done; Ctrl-C ends
    python tests/containers/podkube.py down                   # remove whatever a run left behind

Everything a run makes (containers, network, the folders of its volumes) carries its run id and is
removed when the run ends, on an error or on Ctrl-C.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

RUN_LABEL = "surreal.e2e.run"
POD_LABEL = "surreal.e2e.pod"
WORKLOADS = ("StatefulSet", "Deployment")
# Objects that have nothing to run here; what they promise is kept another way (see `translate`).
PASSIVE = ("ConfigMap", "Secret", "Service", "NetworkPolicy")
# A pod whose container restarted this often without ever being ready is in CrashLoopBackOff.
CRASH_LOOP_RESTARTS = 2


class HarnessError(RuntimeError):
    """One line that says what is wrong; whatever the run had made is already removed."""


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


@dataclass(frozen=True)
class Plan:
    run_id: str
    network: str
    experiment: str
    spec: Mapping[str, Any]
    pods: tuple[PodRun, ...]
    workdir: Path


def load_objects(text: str) -> list[dict[str, Any]]:
    objects = [o for o in yaml.safe_load_all(text) if o]
    if not objects or not all(isinstance(o, dict) and "kind" in o for o in objects):
        raise HarnessError(
            "expected Kubernetes objects (surreal create ... --backend kube --dry-run -o yaml)"
        )
    return objects


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
        raise HarnessError(f"memory quantity {value!r} is not understood")
    number, unit = float(m.group(1)), m.group(2)
    return max(1, round(number * units[unit] if unit else number / 2**20))


def quantity_cpus(value: str) -> str:
    text = str(value)
    cores = int(text[:-1]) / 1000 if text.endswith("m") else float(text)
    return f"{cores:g}"


def pod_name(workload: Mapping[str, Any], ordinal: int, rng: Callable[[int], str]) -> str:
    """StatefulSet pods are NAME-0, NAME-1...; Deployment pods NAME-<template hash>-<5 random>."""
    name = workload["metadata"]["name"]
    if workload["kind"] == "StatefulSet":
        return f"{name}-{ordinal}"
    template = json.dumps(workload["spec"]["template"], sort_keys=True).encode()
    return f"{name}-{hashlib.sha256(template).hexdigest()[:10]}-{rng(5)}"


def _random_suffix(n: int) -> str:
    alphabet = "bcdfghjklmnpqrstvwxz2456789"  # as Kubernetes: no vowels, no look-alikes
    return "".join(secrets.choice(alphabet) for _ in range(n))


def env_flags(container: Mapping[str, Any], pod: str, namespace: str) -> list[str]:
    fields = {"metadata.name": pod, "metadata.namespace": namespace}
    out: list[str] = []
    for var in container.get("env") or []:
        if "value" in var:
            value = str(var["value"])
        else:
            path = ((var.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            if path not in fields:
                raise HarnessError(
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
        raise HarnessError(f"container {container['name']}: runAsNonRoot needs a non-zero runAsUser")
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
        raise HarnessError(f"container {container['name']}: seccomp profile {profile} is not supported")
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
            raise HarnessError(
                f"container {container['name']}: resource {key} is not supported here "
                "(GPUs need a real cluster: make e2e)"
            )
    return flags


def volume_flags(
    pod_spec: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    objects: Mapping[tuple[str, str], Mapping[str, Any]],
    claims: Mapping[str, str],
    poddir: Path,
    voldir: Path,
) -> tuple[list[str], list[HostPath]]:
    """Every volumeMount, from the pod's volumes. `claims` maps a volume name to its claim's name
    (a StatefulSet's claim template); claims live in `voldir` and outlive the pod, everything else
    lives in `poddir` and dies with it."""
    fs_group = int((pod_spec.get("securityContext") or {}).get("fsGroup") or 0)
    volumes = {v["name"]: v for v in pod_spec.get("volumes") or []}
    flags: list[str] = []
    paths: list[HostPath] = []
    for mount in container.get("volumeMounts") or []:
        name, target = mount["name"], mount["mountPath"]
        ro = bool(mount.get("readOnly"))
        vol = volumes.get(name, {})
        if name in claims or "persistentVolumeClaim" in vol:
            claim = claims.get(name) or vol["persistentVolumeClaim"]["claimName"]
            ro = ro or bool((vol.get("persistentVolumeClaim") or {}).get("readOnly"))
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
                raise HarnessError(f"volume {name}: {kind} {ref} is not among the objects")
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
            raise HarnessError(f"volume {name}: only configMap, secret, emptyDir and claims are supported")
    return flags, paths


def translate(
    objects: Sequence[Mapping[str, Any]],
    *,
    workdir: Path,
    run_id: str | None = None,
    rng: Callable[[int], str] = _random_suffix,
) -> Plan:
    """The containers that a cluster would run for `objects`. Services become network aliases of
    the pods they select (the only way the components address each other); the NetworkPolicy is
    kept by the network itself, which holds this experiment's pods and nothing else; node
    selectors, tolerations and affinity have one node to choose from."""
    run_id = run_id or _random_suffix(8)
    by_key = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    for obj in objects:
        if obj["kind"] not in (*WORKLOADS, *PASSIVE):
            raise HarnessError(f"{obj['kind']} {obj['metadata']['name']}: kind is not supported")
    config = next(
        (o for o in objects if o["kind"] == "ConfigMap" and "spec.yaml" in (o.get("data") or {})), None
    )
    if config is None:
        raise HarnessError("no ConfigMap holding spec.yaml: these are not a surreal experiment's objects")
    spec = yaml.safe_load(config["data"]["spec.yaml"])
    services = [o for o in objects if o["kind"] == "Service"]
    pods: list[PodRun] = []
    for work in (o for o in objects if o["kind"] in WORKLOADS):
        template, namespace = work["spec"]["template"], work["metadata"].get("namespace", "default")
        pod_labels = template["metadata"].get("labels") or {}
        selector = work["spec"]["selector"]["matchLabels"]
        if any(pod_labels.get(k) != v for k, v in selector.items()):
            raise HarnessError(
                f"{work['kind']} {work['metadata']['name']}: selector does not match its template"
            )
        pod_spec = template["spec"]
        containers = pod_spec["containers"]
        if len(containers) != 1 or pod_spec.get("initContainers"):
            raise HarnessError(f"{work['metadata']['name']}: only pods of one container are supported")
        container = containers[0]
        policy = pod_spec.get("restartPolicy", "Always")
        aliases = [
            s["metadata"]["name"]
            for s in services
            if all(pod_labels.get(k) == v for k, v in (s["spec"].get("selector") or {}).items())
        ]
        for ordinal in range(int(work["spec"].get("replicas", 1))):
            name = pod_name(work, ordinal, rng)
            poddir = workdir / "pods" / name
            claims = {
                t["metadata"]["name"]: f"{t['metadata']['name']}-{work['metadata']['name']}-{ordinal}"
                for t in work["spec"].get("volumeClaimTemplates") or []
            }
            vflags, paths = volume_flags(
                pod_spec, container, objects=by_key, claims=claims, poddir=poddir, voldir=workdir / "volumes"
            )
            command = list(container.get("command") or [])
            args = list(container.get("args") or [])
            labels = {**pod_labels, RUN_LABEL: run_id, POD_LABEL: name}
            flags = [
                "--name",
                name,
                "--hostname",
                name,
                "--network",
                f"surreal-{run_id}",
                *(x for alias in aliases for x in ("--network-alias", alias)),
                *(x for k, v in sorted(labels.items()) for x in ("--label", f"{k}={v}")),
                "--restart",
                {"Always": "always", "OnFailure": "on-failure", "Never": "no"}[policy],
                *security_flags(pod_spec, container),
                *resource_flags(container),
                *env_flags(container, name, namespace),
                *vflags,
            ]
            if command:
                flags += ["--entrypoint", command[0]]
            probes = {
                k: container[k] for k in ("startupProbe", "readinessProbe", "livenessProbe") if k in container
            }
            pods.append(
                PodRun(
                    name=name,
                    role=str(pod_labels.get("surreal.io/component", "")),
                    workload=work["metadata"]["name"],
                    image=container["image"],
                    args=tuple(flags),
                    command=tuple([*command[1:], *args]),
                    probes={
                        **probes,
                        "_ports": {p.get("name"): p["containerPort"] for p in container.get("ports") or []},
                    },
                    paths=tuple(paths),
                )
            )
    return Plan(
        run_id=run_id,
        network=f"surreal-{run_id}",
        experiment=str(spec.get("name")),
        spec=spec,
        pods=tuple(pods),
        workdir=workdir,
    )


# --- the engine ---------------------------------------------------------------------------------


def containers_conf(workdir: Path) -> Path:
    """podman settings the harness runs with (CONTAINERS_CONF, so nothing of the machine's changes):
    runc where it is installed (crun fails on some hosts' cgroups), the cgroupfs manager (no
    systemd in CI), and no default ulimits (a sandbox may refuse raising them)."""
    lines = [
        "[containers]",
        "default_ulimits = []",
        "[engine]",
        'cgroup_manager = "cgroupfs"',
        'events_logger = "file"',
    ]
    if shutil.which("runc"):
        lines.append('runtime = "runc"')
    path = workdir / "containers.conf"
    path.write_text("\n".join(lines) + "\n")
    return path


class Engine:
    """The container engine's CLI: podman, or docker where a Docker engine answers."""

    def __init__(self, name: str | None = None, env: Mapping[str, str] | None = None) -> None:
        self.name = name or find_engine()
        self.env = dict(os.environ if env is None else env)

    def __call__(self, *args: str, check: bool = True, timeout: float = 120, capture: bool = True) -> str:
        try:
            proc = subprocess.run(
                [self.name, *args],
                env=self.env,
                capture_output=capture,
                text=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            raise HarnessError(f"{self.name} {args[0]} did not answer within {timeout:.0f} s") from exc
        if check and proc.returncode != 0:
            err = (proc.stderr or proc.stdout or "").strip().splitlines()
            raise HarnessError(
                f"{self.name} {' '.join(args[:2])}: {err[-1] if err else f'exit {proc.returncode}'}"
            )
        return proc.stdout or ""

    def image_exists(self, image: str) -> bool:
        return (
            subprocess.run(
                [self.name, "image", "inspect", image],
                env=self.env,
                capture_output=True,
                stdin=subprocess.DEVNULL,
            ).returncode
            == 0
        )

    def inspect(self, names: Iterable[str]) -> list[dict[str, Any]]:
        names = list(names)
        if not names:
            return []
        out = self("inspect", "--type", "container", *names, check=False)
        return list(json.loads(out)) if out.strip() else []

    def ids(self, run_id: str | None = None) -> list[str]:
        label = f"{RUN_LABEL}={run_id}" if run_id else RUN_LABEL
        return self("ps", "-a", "-q", "--filter", f"label={label}").split()


def find_engine() -> str:
    if shutil.which("podman"):
        return "podman"
    if (
        shutil.which("docker")
        and subprocess.run(["docker", "info"], capture_output=True, stdin=subprocess.DEVNULL).returncode == 0
    ):
        return "docker"
    raise HarnessError("no container engine: install podman (apt-get install podman runc) or start Docker")


# --- a run --------------------------------------------------------------------------------------


class Run:
    """Starts a plan's containers and removes everything it made when closed (also on SIGINT and
    SIGTERM). `pods()` reports them as the API would, so kube_status can read them as `surreal
    status` does."""

    def __init__(self, plan: Plan, engine: Engine) -> None:
        self.plan = plan
        self.engine = engine
        self.started: list[PodRun] = []
        self._closed = False

    # lifecycle

    def __enter__(self) -> Run:
        self._old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        for sig in self._old:
            signal.signal(sig, self._interrupted)
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        for sig, handler in self._old.items():
            signal.signal(sig, handler)

    def _interrupted(self, signum: int, _frame: object) -> None:
        self.close()
        raise KeyboardInterrupt(f"signal {signum}")

    def start(self) -> None:
        plan, engine = self.plan, self.engine
        images = {p.image for p in plan.pods}
        for image in images:
            if not engine.image_exists(image):
                raise HarnessError(
                    f"image {image} does not exist in {engine.name}'s store (make image IMAGE={image})"
                )
        for pod in plan.pods:
            for host in pod.paths:
                make_host_path(host)
        engine("network", "create", "--internal", "--label", f"{RUN_LABEL}={plan.run_id}", plan.network)
        # The learner first, as a StatefulSet's pod usually is; the rest retry until it serves.
        for pod in sorted(plan.pods, key=lambda p: p.workload != f"{plan.experiment}-learner"):
            engine("run", "--detach", *pod.args, pod.image, *pod.command)
            self.started.append(pod)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        remove_run(self.engine, self.plan.run_id)
        shutil.rmtree(self.plan.workdir / "pods", ignore_errors=True)
        shutil.rmtree(self.plan.workdir / "volumes", ignore_errors=True)

    # observation

    def pod(self, role: str) -> PodRun:
        return next(p for p in self.plan.pods if p.role == role)

    def pods_of(self, role: str) -> list[PodRun]:
        return [p for p in self.plan.pods if p.role == role]

    def probe(self, pod: PodRun, kind: str = "readinessProbe") -> bool:
        """Run the pod's probe from inside its network namespace, as the kubelet would from its node."""
        probe = pod.probes.get(kind)
        if probe is None:
            return True
        ports = pod.probes.get("_ports") or {}
        if "grpc" in probe:
            port = probe["grpc"]["port"]
            code = (
                "import grpc,sys; from grpc_health.v1 import health_pb2 as h, health_pb2_grpc as g; "
                f"r=g.HealthStub(grpc.insecure_channel('127.0.0.1:{port}')).Check(h.HealthCheckRequest(), "
                "timeout=5); sys.exit(0 if r.status == h.HealthCheckResponse.SERVING else 1)"
            )
        elif "httpGet" in probe:
            port = probe["httpGet"]["port"]
            url = f"http://127.0.0.1:{ports.get(port, port)}{probe['httpGet'].get('path', '/')}"
            get = f"urllib.request.urlopen({url!r}, timeout=5).status"
            code = f"import urllib.request,sys; sys.exit(0 if {get} < 400 else 1)"
        else:
            raise HarnessError(f"{pod.name}: probe {probe} is not supported")
        return self.exec_ok(pod, ["python3", "-c", code])

    def exec_ok(self, pod: PodRun, argv: Sequence[str]) -> bool:
        proc = subprocess.run(
            [self.engine.name, "exec", pod.name, *argv],
            env=self.engine.env,
            capture_output=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        return proc.returncode == 0

    def exec(self, pod: PodRun, argv: Sequence[str]) -> str:
        return self.engine("exec", pod.name, *argv)

    def logs(self, pod: PodRun) -> str:
        proc = subprocess.run(
            [self.engine.name, "logs", pod.name],
            env=self.engine.env,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        return proc.stdout + proc.stderr

    def pods(self, probe: bool = True) -> list[dict[str, Any]]:
        """The pods as the API shows them (metadata.labels, status.containerStatuses)."""
        by_name = {c["Name"]: c for c in self.engine.inspect(p.name for p in self.started)}
        out = []
        for pod in self.started:
            info = by_name.get(pod.name)
            state: dict[str, Any]
            if info is None:
                state = {"waiting": {"reason": "ContainerCreating"}}
            elif info["State"].get("Running"):
                state = {"running": {"startedAt": info["State"].get("StartedAt")}}
            elif info["State"].get("Status") in ("exited", "stopped") and pod_restart_policy(pod) == "no":
                state = {"terminated": {"exitCode": info["State"].get("ExitCode")}}
            else:  # exited or restarting under restart=always: the kubelet would be backing off
                state = {
                    "waiting": {"reason": "CrashLoopBackOff"},
                    "lastExitCode": info["State"].get("ExitCode"),
                }
            ready = "running" in state and (not probe or self.probe(pod))
            labels = {k: v for k, v in (info or {}).get("Config", {}).get("Labels", {}).items()}
            out.append(
                {
                    "metadata": {"name": pod.name, "labels": labels or {"surreal.io/component": pod.role}},
                    "status": {
                        "phase": "Running" if "running" in state else "Pending",
                        "containerStatuses": [
                            {
                                "name": pod.role,
                                "ready": ready,
                                "restartCount": int((info or {}).get("RestartCount") or 0),
                                "state": state,
                            }
                        ],
                    },
                }
            )
        return out

    def restarts(self, pod: PodRun) -> int:
        info = self.engine.inspect([pod.name])
        return int(info[0].get("RestartCount") or 0) if info else 0

    def learner_status(self) -> dict[str, Any]:
        """What the learner writes into its claim about once a second (status.json)."""
        claim = self.plan.workdir / "volumes" / f"data-{self.plan.experiment}-learner-0" / "status.json"
        try:
            return dict(json.loads(claim.read_text()))
        except (OSError, ValueError):
            return {}

    def status(self, probe: bool = True) -> dict[str, Any]:
        """`surreal status NAME -o json` of this run, from the same code the kube backend uses."""
        from surreal.orchestrator import kube_status

        return kube_status.status(self.plan.spec, self.pods(probe), self.learner_status())

    def check_crash_loops(self) -> None:
        """A container that keeps exiting without ever having been ready: one line naming it."""
        for info in self.engine.inspect(p.name for p in self.started):
            if int(info.get("RestartCount") or 0) >= CRASH_LOOP_RESTARTS or (
                not info["State"].get("Running")
                and info["State"].get("ExitCode")
                and info.get("HostConfig", {}).get("RestartPolicy", {}).get("Name") in ("", "no")
            ):
                name = info["Name"]
                tail = [
                    line
                    for line in self.logs(next(p for p in self.started if p.name == name)).splitlines()
                    if line.strip()
                ]
                raise HarnessError(
                    f"container {name} exits at start (exit code {info['State'].get('ExitCode')}, "
                    f"{info.get('RestartCount', 0)} restarts): {tail[-1] if tail else 'no output'}"
                )

    def wait_for(self, what: str, predicate: Callable[[], bool], timeout: float, poll: float = 2.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.check_crash_loops()
            if predicate():
                return
            if time.monotonic() > deadline:
                raise HarnessError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(poll)

    def kill(self, pod: PodRun, sig: int = signal.SIGKILL) -> int:
        """Signal the container's PID 1 from the host, as a crash or the OOM killer would."""
        info = self.engine.inspect([pod.name])
        pid = int(info[0]["State"]["Pid"]) if info else 0
        if pid <= 0:
            raise HarnessError(f"{pod.name} is not running")
        os.kill(pid, sig)
        return pid


def pod_restart_policy(pod: PodRun) -> str:
    return pod.args[pod.args.index("--restart") + 1]


def make_host_path(host: HostPath) -> None:
    host.path.mkdir(parents=True, exist_ok=True)
    for name, text in host.files.items():
        (host.path / name).write_text(text)
        os.chmod(host.path / name, host.mode)
        if os.geteuid() == 0:
            os.chown(host.path / name, 0, host.gid)
    if host.files:
        os.chmod(host.path, 0o755)
    else:
        os.chmod(host.path, host.mode)
        if os.geteuid() == 0:
            os.chown(host.path, 0, host.gid)


def remove_run(engine: Engine, run_id: str | None = None) -> None:
    """Every container and network of `run_id` (of every run when None)."""
    label = f"label={RUN_LABEL}={run_id}" if run_id else f"label={RUN_LABEL}"
    ids = engine("ps", "-a", "-q", "--filter", label, check=False).split()
    if ids:
        engine("rm", "--force", "--time", "2", *ids, check=False, timeout=180)
    nets = engine("network", "ls", "-q", "--filter", label, check=False).split()
    if nets:
        engine("network", "rm", "--force", *nets, check=False)


def new_workdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="surreal-pods-"))


def engine_for(workdir: Path) -> Engine:
    name = find_engine()
    env = dict(os.environ)
    if name == "podman" and "CONTAINERS_CONF" not in env:
        env["CONTAINERS_CONF"] = str(containers_conf(workdir))
    return Engine(name, env)


# --- command line -------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="podkube", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="run the objects' pods until the learner is done (then remove them)")
    up.add_argument("objects", help="a YAML file of objects, or - for standard input")
    up.add_argument("--timeout", type=float, default=1800, help="seconds to wait for the end of the run")
    up.add_argument("--keep", action="store_true", help="leave the containers running once done")
    sub.add_parser("down", help="remove every container and network that a run left behind")
    args = parser.parse_args(argv)
    workdir, keep = new_workdir(), False
    try:
        engine = engine_for(workdir)
        if args.cmd == "down":
            remove_run(engine)
            return 0
        text = sys.stdin.read() if args.objects == "-" else Path(args.objects).read_text()
        plan = translate(load_objects(text), workdir=workdir)
        with Run(plan, engine) as run:
            print(f"run {plan.run_id}: {len(plan.pods)} containers on network {plan.network}", flush=True)
            last = ""

            def done() -> bool:
                nonlocal last
                st = run.status(probe=False)
                line = (
                    f"{st['phase']}: {st.get('env_steps') or 0} steps, {st.get('updates') or 0} updates, "
                    f"eval {st.get('eval_return')}"
                )
                if line != last:
                    print(line, flush=True)
                    last = line
                return st["phase"] == "Succeeded"

            run.wait_for("the learner to report the run done", done, args.timeout)
            print(json.dumps(run.status(), indent=2, default=str))
            if args.keep:
                print(f"left running, volumes in {workdir}; remove with: python {sys.argv[0]} down")
                run._closed = keep = True
        return 0
    except HarnessError as exc:
        print(f"podkube: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("podkube: interrupted; everything this run made is removed", file=sys.stderr)
        return 130
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

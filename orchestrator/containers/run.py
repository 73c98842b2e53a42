"""The container engine (podman, or Docker where a daemon answers) and a running plan: start its
containers, run its Jobs as the Job controller would (`reconcile`: a failed pod is replaced or
fails its Job, jobs.py), watch them as the Kubernetes API would show their pods and Jobs,
stop them within their grace period, remove everything it made.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from surreal.orchestrator.containers.jobs import JobController, PodAction
from surreal.orchestrator.containers.plan import RUN_LABEL, ContainersError, HostPath, Plan, PodRun, job_pod
from surreal.orchestrator.kube.render import object_names
from surreal.orchestrator.status import describe_container_exit

# A pod whose container restarted this often without ever being ready is in CrashLoopBackOff.
CRASH_LOOP_RESTARTS = 2


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

    def __init__(self, name: str, env: Mapping[str, str]) -> None:
        self.name = name
        self.env = dict(env)

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
            raise ContainersError(f"{self.name} {args[0]} did not answer within {timeout:.0f} s") from exc
        if check and proc.returncode != 0:
            err = (proc.stderr or proc.stdout or "").strip().splitlines()
            raise ContainersError(
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


def find_engine() -> str:
    if shutil.which("podman"):
        return "podman"
    if (
        shutil.which("docker")
        and subprocess.run(["docker", "info"], capture_output=True, stdin=subprocess.DEVNULL).returncode == 0
    ):
        return "docker"
    raise ContainersError("no container engine: install podman (apt-get install podman runc) or start Docker")


# --- a run --------------------------------------------------------------------------------------


class Run:
    """Starts a plan's containers, runs its Jobs, and removes everything it made when closed.
    `pods()` and `jobs()` report them as the API would, for kube.observe."""

    def __init__(
        self,
        plan: Plan,
        engine: Engine,
        started: Iterable[PodRun] = (),
        controller: JobController | None = None,
        handled: Iterable[str] = (),
    ) -> None:
        self.plan = plan
        self.engine = engine
        self.started: list[PodRun] = list(started)  # a run started earlier: its pods, to watch
        self.controller = controller or JobController(plan.jobs)
        self.handled: set[str] = set(handled)  # ended Job pods the controller has decided on
        self.exit_codes: dict[str, int] = {}  # of the Job pods decided on by this process, by pod name
        self._due: list[tuple[float, str, int]] = []  # (monotonic time, job, index) to replace
        # The run is over (or being stopped): pods that end are accounted for, none is started.
        self.stopping = False
        # Its JobSet is suspended (a queued experiment's resize): it holds no pod until `resume`.
        self.suspended = False
        self._closed = False

    # lifecycle

    def start(self) -> None:
        plan, engine = self.plan, self.engine
        for image in {p.image for p in plan.pods}:
            if not engine.image_exists(image):
                raise ContainersError(
                    f"image {image} does not exist in {engine.name}'s store (make image IMAGE={image})"
                )
        for pod in plan.pods:
            for host in pod.paths:
                make_host_path(host)
        engine("network", "create", "--internal", "--label", f"{RUN_LABEL}={plan.run_id}", plan.network)
        for pod in learner_first(plan.pods):
            self.start_pod(pod)

    def start_pod(self, pod: PodRun) -> None:
        for host in pod.paths:
            make_host_path(host)
        self.engine("run", "--detach", *pod.args, pod.image, *pod.command)
        self.started.append(pod)

    def stop_pod(self, pod: PodRun) -> None:
        """SIGTERM, then SIGKILL after the pod's terminationGracePeriodSeconds (as the kubelet)."""
        self.engine("stop", "--time", str(pod.grace_seconds), pod.name, check=False,
                     timeout=pod.grace_seconds + 60)  # fmt: skip

    def retire_pod(self, pod: PodRun, stopped: bool = False) -> None:
        """A pod of an index that a scale dropped, deleted as the Job controller would: stopped
        (unless `stopped` already), its log kept in the run's logs/ folder, the container removed."""
        if not stopped:
            self.stop_pod(pod)
        logs = self.plan.workdir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        (logs / f"{pod.name}.log").write_text(self.logs(pod))
        self.engine("rm", "--force", pod.name, check=False)
        self.handled.add(pod.name)
        self.started.remove(pod)

    def suspend(self) -> None:
        """The JobSet suspended (a queued experiment's resize): as its controller deletes the Jobs,
        every Job pod gets SIGTERM at once and the longest grace period among them; their pods are
        retired, and nothing is replaced or started until `resume`."""
        self.suspended = True
        self._due.clear()
        pods = self.live_job_pods()
        if pods:
            grace = max(p.grace_seconds for p in pods)
            names = [p.name for p in pods]
            self.engine("stop", "--time", str(grace), *names, check=False, timeout=grace + 60)
        for pod in pods:
            self.retire_pod(pod, stopped=True)

    def resume(self, plan: Plan) -> None:
        """The JobSet made again and admitted (`plan`: its objects translated on this run's network):
        new Jobs with nothing counted yet, every index started, the learner first."""
        self.plan = plan
        self.controller = JobController(plan.jobs)
        self.suspended = False
        for pod in learner_first(plan.pods):
            if self.is_job_pod(pod):
                self.start_pod(pod)

    # the Job controller

    def is_job_pod(self, pod: PodRun) -> bool:
        return pod.workload in self.controller.jobs

    def live_job_pods(self) -> list[PodRun]:
        """The Job pods the controller has not decided on: running, or ended since it last looked."""
        return [p for p in self.started if self.is_job_pod(p) and p.name not in self.handled]

    def reconcile(self) -> bool:
        """What the Job controller does, once: decide on every Job pod that ended, start the
        replacements that are due and the indexes a scale added, stop the pods of a failed Job
        and of dropped indexes. True if a pod was started or a Job's state changed."""
        if self.suspended:
            return False
        changed = False
        running: dict[tuple[str, int], PodRun] = {}
        live = self.live_job_pods()
        infos = {c["Name"]: c for c in self.engine.inspect(p.name for p in live)}
        for pod in live:
            state = (infos.get(pod.name) or {}).get("State") or {}
            if state.get("Running") or state.get("Status") not in ("exited", "stopped"):
                running[(pod.workload, pod.index)] = pod
                continue
            self.handled.add(pod.name)
            changed = True
            self.exit_codes[pod.name] = int(state.get("ExitCode") or 0)
            decision = self.controller.exited(pod.workload, pod.name, pod.index, self.exit_codes[pod.name])
            if decision.action is PodAction.REPLACE:
                self._due.append((time.monotonic() + decision.delay, pod.workload, pod.index))
            elif decision.action is PodAction.FAIL_JOB:
                for other in [p for p in self.started if p.workload == pod.workload and p is not pod]:
                    self.stop_pod(other)
        if self.stopping:
            self._due.clear()
            return changed
        waiting = {(name, index) for _, name, index in self._due}  # replacements not yet due
        for name, job in self.controller.jobs.items():
            if job.ended:
                continue
            for (work, index), pod in running.items():  # indexes a scale dropped
                if work == name and index >= job.completions:
                    self.retire_pod(pod)
                    changed = True
            for index in range(job.completions):  # indexes without a pod: a scale added them
                if (name, index) in running or (name, index) in waiting:
                    continue
                if index in job.succeeded or index in job.failed_indexes:
                    continue
                self.start_pod(job_pod(self.plan, name, index))
                changed = True
        now = time.monotonic()
        for due in sorted(d for d in self._due if d[0] <= now):
            self._due.remove(due)
            _, name, index = due
            job = self.controller.state(name)
            if not job.ended and index < job.completions and (name, index) not in running:
                self.start_pod(job_pod(self.plan, name, index))
                changed = True
        return changed

    def job_failure(self, role: str | None = None) -> str:
        """One line for a failed Job (of `role`, or any): its reason, how its last pod ended (in the
        words of every backend: `describe_exit`) and its last words."""
        for name, job in self.controller.jobs.items():
            if job.condition != "Failed" or (role is not None and job.job.role != role):
                continue
            pods = [p for p in self.started if p.workload == name]
            if not pods:
                return f"Job {name} failed ({job.reason}: {job.message})"
            last = pods[-1]
            tail = [line for line in self.logs(last).splitlines() if line.strip()]
            code = self.exit_codes.get(last.name)
            ended = f" ended ({describe_container_exit(code)})" if code is not None else ""
            said = f"; its last line: {tail[-1]}" if tail else "; it logged nothing"
            return f"Job {name} failed ({job.reason}: {job.message}); its last pod {last.name}{ended}{said}"
        return ""

    def jobs(self) -> list[dict[str, Any]]:
        """The Jobs as the API shows them."""
        return self.controller.as_api(Counter(p.workload for p in self.live_job_pods()))

    def close(self, keep_volumes: bool = False) -> None:
        """Remove the containers, the network and the pods' folders (ConfigMap and Secret copies);
        the claims too unless `keep_volumes`."""
        if self._closed:
            return
        self._closed = True
        remove_run(self.engine, self.plan.run_id)
        shutil.rmtree(self.plan.workdir / "pods", ignore_errors=True)
        if not keep_volumes:
            shutil.rmtree(self.plan.workdir / "volumes", ignore_errors=True)

    # observation

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
            raise ContainersError(f"{pod.name}: probe {probe} is not supported")
        try:
            proc = subprocess.run(
                [self.engine.name, "exec", pod.name, "python3", "-c", code],
                env=self.engine.env,
                capture_output=True,
                timeout=60,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:  # as the kubelet takes a probe past its timeout: not ready
            return False
        return proc.returncode == 0

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
                state = {"terminated": {"exitCode": info["State"].get("ExitCode"),
                                        "finishedAt": info["State"].get("FinishedAt"),
                                        "message": termination_message(pod)}}  # fmt: skip
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

    def check_crash_loops(self) -> None:
        """A container of a Deployment that keeps exiting without ever having been ready: one line
        naming it (a Job's pods are the Job controller's: `reconcile`)."""
        for info in self.engine.inspect(p.name for p in self.started if not self.is_job_pod(p)):
            if int(info.get("RestartCount") or 0) >= CRASH_LOOP_RESTARTS or (
                not info["State"].get("Running")
                and info["State"].get("ExitCode")
                and info.get("HostConfig", {}).get("RestartPolicy", {}).get("Name") in ("", "no")
            ):
                name = info["Name"]
                pod = next(p for p in self.started if p.name == name)
                tail = [line for line in self.logs(pod).splitlines() if line.strip()]
                raise ContainersError(
                    f"container {name} exits at start (exit code {info['State'].get('ExitCode')}, "
                    f"{info.get('RestartCount', 0)} restarts): {tail[-1] if tail else 'no output'}"
                )


def learner_first(pods: Iterable[PodRun]) -> list[PodRun]:
    """The order pods start in: the learner's first; the rest retry until it serves."""
    return sorted(pods, key=lambda p: p.role != "learner")


def pod_restart_policy(pod: PodRun) -> str:
    return pod.args[pod.args.index("--restart") + 1]


def termination_message(pod: PodRun) -> str:
    """What the container wrote to its termination message file (at most 4096 bytes are kept)."""
    if not pod.termination_log:
        return ""
    try:
        return Path(pod.termination_log).read_text()[:4096]
    except OSError:
        return ""


def claim_dir(plan: Plan) -> Path:
    """The learner's claim on this machine: the folder that stands for its PersistentVolumeClaim."""
    return plan.workdir / "volumes" / object_names(plan.experiment)["claim"]


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


def remove_run(engine: Engine, run_id: str) -> None:
    """Every container and network of run `run_id`; ContainersError if any container is left."""
    if not run_id:
        raise ContainersError("no run id: refusing to remove every run's containers")
    label = f"label={RUN_LABEL}={run_id}"
    ids = engine("ps", "-a", "-q", "--filter", label, check=False).split()
    if ids:
        engine("rm", "--force", "--time", "2", *ids, check=False, timeout=180)
    nets = engine("network", "ls", "-q", "--filter", label, check=False).split()
    if nets:
        engine("network", "rm", "--force", *nets, check=False)
    left = engine("ps", "-a", "-q", "--filter", label, check=False).split()
    if left:
        raise ContainersError(
            f"{len(left)} containers of run {run_id} are still there ({engine.name} rm failed)"
        )


def remove_containers_under(engine: Engine, workdir: Path) -> None:
    """Every container that mounts a path inside `workdir` (an experiment whose record is lost:
    its run id with it), and the networks of their runs."""
    root = os.path.realpath(workdir)
    ids = engine("ps", "-a", "-q", "--filter", f"label={RUN_LABEL}", check=False).split()
    runs = set()
    for info in engine.inspect(ids) if ids else []:
        sources = [str(m.get("Source", "")) for m in info.get("Mounts") or []]
        if any(src == root or src.startswith(root + os.sep) for src in sources):
            runs.add(str((info.get("Config", {}).get("Labels") or {}).get(RUN_LABEL, "")))
    for run_id in sorted(r for r in runs if r):
        remove_run(engine, run_id)


def engine_for(workdir: Path) -> Engine:
    name = find_engine()
    env = dict(os.environ)
    if name == "podman" and "CONTAINERS_CONF" not in env:
        env["CONTAINERS_CONF"] = str(containers_conf(workdir))
    return Engine(name, env)

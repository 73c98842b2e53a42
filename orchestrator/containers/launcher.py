"""The containers backend: an experiment's rendered Kubernetes objects run as real containers on
podman (or Docker where a daemon answers), no cluster needed, with the local backend's commands.

The experiment lives in `$SURREAL_HOME/experiments/NAME/` like a local one: spec.yaml, objects.yaml
(0600: the Secret's token is in it; `scale` patches the actors' Job there, as kubectl would),
containers.json (the engine, the plan, every pod started, the Jobs' state and, once the run ended,
its final phase and components), volumes/ (the learner's claim: status.json, checkpoints,
TensorBoard events), and logs/ (every container's log, kept when the run ends).

One controller runs the experiment's Jobs (`control`): the foreground `create` itself, or for
`--detach` a process of its own (logs/controller.log). It replaces failed pods as the Job
controller would, takes scales, and ends the run when the learner's Job has completed or failed:
it waits for the workers' pods to end by themselves, keeps the logs, and removes the containers
and their network (on Ctrl-C or SIGTERM too, then the phase is Stopped); the claim stays, so
`status`, `logs`, `tensorboard` and `plot` work after the end.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import yaml

from surreal.orchestrator import home, resize
from surreal.orchestrator.containers.jobs import JobController
from surreal.orchestrator.containers.plan import (
    ContainersError,
    Plan,
    PodRun,
    jobset_of,
    plan_from_dict,
    plan_to_dict,
    translate,
)
from surreal.orchestrator.containers.run import (
    Engine,
    Run,
    claim_dir,
    engine_for,
    remove_containers_under,
    remove_run,
)
from surreal.orchestrator.files import read_json, write_atomic, write_json_atomic
from surreal.orchestrator.home import LOG_DIR
from surreal.orchestrator.home_launcher import HomeLauncher, read_log
from surreal.orchestrator.kube import observe as kube_status
from surreal.orchestrator.kube import output as kube_output
from surreal.orchestrator.kube import render as kube_render
from surreal.orchestrator.launcher import (
    CorruptFile,
    Launched,
    LauncherError,
    Placement,
    UsageError,
    Watcher,
    wait_until,
)
from surreal.orchestrator.policy import outcome
from surreal.orchestrator.program import pod_split, workers_problem
from surreal.orchestrator.status import status_object
from surreal.spec import ExperimentSpec, SpecError, spec_from_dict

RECORD = "containers.json"
OBJECTS = "objects.yaml"
PRIVATE = 0o600  # RECORD and OBJECTS hold the experiment's Secret (its token): only the owner reads them
CONTROLLER_LOG = "controller"  # logs/controller.log: a detached run's controller
POLL_SECONDS = 1.0  # each look at the containers is a `podman inspect`
SCALE_WAIT_SECONDS = 60.0
# Once the learner's Job has completed, its workers see `done` and exit on their own; a pod still
# running this long after is stopped (and named in the record's "stopped_at_end").
END_WAIT_SECONDS = 60.0


class ContainersLauncher(HomeLauncher):
    backend = "containers"

    def engine(self) -> Engine:
        """The engine, with podman's settings in $SURREAL_HOME (ContainersError if there is none)."""
        self.home.mkdir(parents=True, exist_ok=True)
        return engine_for(self.home)

    # --- create -----------------------------------------------------------------------------

    def dry_run(self, spec: ExperimentSpec, output: str, placement: Placement) -> str:
        self.check_placement(placement)
        home.refuse_existing(self.home, spec.name)
        if output == "helm-values":
            raise UsageError("-o helm-values needs --backend kube")
        try:
            return kube_output.dry_run(spec, output, token=kube_render.new_token())
        except kube_render.RenderError as exc:
            raise UsageError(str(exc)) from None

    def create(
        self, spec: ExperimentSpec, *, detach: bool, placement: Placement, watch: Watcher | None = None
    ) -> Launched:
        self.check_placement(placement)
        if spec.gpu:
            raise UsageError("--gpu needs a cluster (containers here run on the CPU): use --backend kube")
        engine = self.engine()
        try:
            objects = admitted(kube_render.render(spec, token=kube_render.new_token()))
        except kube_render.RenderError as exc:
            raise UsageError(str(exc)) from None
        image = kube_render.kube_spec(spec).image
        if not engine.image_exists(image):
            raise ContainersError(
                f"image {image} is not in {engine.name}'s store (build it: make image IMAGE={image})"
            )
        plan = translate(objects, workdir=home.experiment_dir(self.home, spec.name))

        def write(staging: Path) -> None:
            write_atomic(staging / OBJECTS, kube_output.to_yaml(objects), PRIVATE)
            write_json_atomic(staging / RECORD, {"engine": engine.name, "plan": plan_to_dict(plan)}, PRIVATE)

        exp_dir = home.create_dir(spec, self.home, write)
        run = Run(plan, engine)
        with _interrupts():  # from here on SIGTERM and SIGHUP end the wait as Ctrl-C does
            try:
                run.start()
                save_run(exp_dir, run)
                if detach:
                    spawn_controller(exp_dir)
            except KeyboardInterrupt:
                if detach:
                    with _shielded():
                        run.close()
                        _remove_tree(exp_dir, engine)
                    raise
                # Ctrl-C (or SIGTERM) while the containers start: what started is stopped and the
                # run kept as Stopped, as when it comes a moment later, while the run is watched.
                _finish(exp_dir, run, "Stopped", "")
                return Launched(spec.name, "", phase="Stopped")
            except BaseException:
                with _shielded():
                    run.close()
                    _remove_tree(exp_dir, engine)
                raise
            if detach:
                return Launched(
                    spec.name,
                    f"experiment {spec.name!r} started in {len(plan.pods)} {engine.name} containers; "
                    f"`surreal status {spec.name}`",
                )
            if watch is not None:
                watch.started(
                    f"experiment {spec.name!r}: {spec.algo} on {spec.env}, {spec.agents} agents in "
                    f"{len(plan.pods)} {engine.name} containers ({image}), {spec.steps:,} steps; "
                    f"files in {exp_dir}"
                )
            return Launched(spec.name, "", phase=control(exp_dir, run, watch))

    # --- observation -----------------------------------------------------------------------

    def status_of(self, exp_dir: Path) -> dict[str, Any]:
        record = read_record(exp_dir)
        plan = plan_from_dict(record["plan"])
        spec = home.read_spec(exp_dir)
        metrics = learner_metrics(plan)
        if "phase" in record:  # ended: what was kept
            return status_object(
                spec,
                backend=self.backend,
                phase=record["phase"],
                metrics=metrics,
                components=record["components"],
                namespace=spec.get("namespace"),
                jobs=record.get("job_rows", []),
                problem=record.get("problem") or None,
                admission="Finished" if spec.get("queue") else None,
            )
        run = load_run(exp_dir, record, self._engine_of(record))
        return kube_status.status(spec, run.pods(probe=False), metrics, backend=self.backend, jobs=run.jobs(),
                                  admission=admission_of(exp_dir, spec))  # fmt: skip

    def logs_of(
        self, exp_dir: Path, component: str, *, follow: bool, lines: int | None, previous: bool
    ) -> Iterator[str]:
        record = read_record(exp_dir)
        plan = plan_from_dict(record["plan"])
        if (exp_dir / LOG_DIR / f"{component}.log").is_file():  # a pod's log kept (it ended, or a resize)
            return read_log(exp_dir, component, lines=lines)
        if "phase" in record:
            pods = [_pod_view(c["name"], c["role"]) for c in record["components"]]
            pod, _ = kube_status.pick_pod(pods, component, exp_dir.name)
            return read_log(exp_dir, pod, lines=lines)
        # the newest pod of each index first: `logs NAME learner` is the learner that runs now
        pods = [_pod_view(p.name, p.role) for p in reversed(plan.pods)]
        pod, _ = kube_status.pick_pod(pods, component, exp_dir.name)
        return _engine_logs(self._engine_of(record), pod, follow=follow, lines=lines)

    def tb_dir(self, exp_dir: Path) -> Path:
        return claim_dir(plan_from_dict(read_record(exp_dir)["plan"])) / "tb"

    # --- change -----------------------------------------------------------------------------

    def scale_of(self, exp_dir: Path, agents: int, learner_pods: int | None) -> str:
        """In place by resize.py's rule, or, for a queued experiment, by its resize."""
        steps = _InPlace(exp_dir, home.load_spec(exp_dir), plan_from_dict(read_record(exp_dir)["plan"]))
        if not steps.spec.queue:
            return resize.scale_in_place(steps, agents, learner_pods, SCALE_WAIT_SECONDS)
        if (ended := steps.not_running()) is not None:
            raise LauncherError(f"experiment {exp_dir.name!r} {ended}; nothing to scale")
        return self._resize(exp_dir, steps.plan, steps.spec, agents, learner_pods)

    def _resize(
        self, exp_dir: Path, plan: Plan, spec: ExperimentSpec, agents: int, learner_pods: int | None
    ) -> str:
        """A queued experiment at its new size: the new spec and objects are made (and refused,
        with nothing changed, where they cannot be) before resize.py's steps begin; then it waits
        for the controller to start the new pods."""
        name = exp_dir.name
        pods = spec.learner_pods if learner_pods is None else learner_pods
        try:
            changed = {"name": name, "agents": agents, "learner_pods": pods}
            new_spec = spec_from_dict({**spec.to_dict(), **changed})
            token = next(o["stringData"]["token"] for o in _objects(exp_dir) if o["kind"] == "Secret")
            objects = admitted(kube_render.render(new_spec, token=token))
        except (SpecError, kube_render.RenderError) as exc:
            raise UsageError(f"experiment {name!r}: {exc}") from None
        resize.resize(_QueuedResize(exp_dir, new_spec, objects), poll_seconds=POLL_SECONDS)
        actor = kube_render.job_names(name, True)["actor"]
        replicas = agents // spec.agents_per_pod

        def taken() -> bool:
            latest = read_record(exp_dir)
            jobs = {j["job"]: j for j in latest.get("jobs") or []}
            return "phase" in latest or int(jobs.get(actor, {}).get("completions", -1)) == replicas

        wait_until(f"the controller of {name!r} to start it again", taken, SCALE_WAIT_SECONDS)
        return (f"experiment {name!r}: suspended (the learner saved), made again with {agents} agents in "
                f"{replicas} actor containers and {pods} learner pod(s), admitted and resumed from its "
                "checkpoint")  # fmt: skip

    def delete_of(self, exp_dir: Path) -> None:
        """Stop the run's controller (it removes what it started), remove whatever is left (checked
        gone), then the folder."""
        try:
            record = read_record(exp_dir)
        except LauncherError:  # a corrupt record: find what ran from this folder instead
            home.stop_strays(exp_dir)  # its controller, by its argument
            engine = self.engine()
            remove_containers_under(engine, exp_dir)
            _remove_tree(exp_dir, engine)
            return
        engine = self._engine_of(record)
        plan = plan_from_dict(record["plan"])
        home.mark_deleting(claim_dir(plan))  # the shards, stopped next, save nothing (no replacement)
        stop_controller(record)
        remove_run(engine, plan.run_id)
        _remove_tree(exp_dir, engine)

    def _engine_of(self, record: dict[str, Any]) -> Engine:
        """The engine the run was started on (podman and Docker do not see each other's)."""
        engine = self.engine()
        recorded = record.get("engine")
        if engine.name == recorded:
            return engine
        if recorded in ("podman", "docker") and shutil.which(str(recorded)):
            return Engine(str(recorded), engine.env)
        raise ContainersError(f"the experiment runs on {recorded}, which is not installed here")


def read_record(exp_dir: Path) -> dict[str, Any]:
    data = read_json(exp_dir / RECORD, required=True)
    assert data is not None
    try:
        if not plan_from_dict(data["plan"]).run_id:
            raise ValueError("an empty run id")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CorruptFile(exp_dir / RECORD, f"corrupt: not a plan surreal wrote ({exc!r})") from None
    return dict(data)


def learner_metrics(plan: Plan) -> dict[str, Any]:
    """What the learner writes into its claim about once a second (status.json)."""
    return home.read_metrics(claim_dir(plan))


def poll_learner_metrics(plan: Plan) -> dict[str, Any]:
    """learner_metrics for the controller's loop, which goes on past a corrupt file."""
    return home.poll_metrics(claim_dir(plan))


# --- a queue's stand-in ----------------------------------------------------------------------------

# In the experiment's folder while `surreal scale` resizes a queued experiment: the agents and
# learner pods it is resized to (status: admission).
RESIZE = "resize.json"


def admitted(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A queued experiment's objects as its queue admits them: here a stand-in for Kueue with room
    for anything (one machine, no quota) admits at once, unsuspending the JobSet as Kueue does."""
    return _suspended(objects, False)


def _suspended(objects: list[dict[str, Any]], suspend: bool) -> list[dict[str, Any]]:
    """`objects` with their JobSet's `spec.suspend` set to `suspend` (in place)."""
    for obj in objects:
        if obj["kind"] == "JobSet":
            obj["spec"]["suspend"] = suspend
    return objects


def admission_of(exp_dir: Path, spec: dict[str, Any]) -> str | None:
    """Where a queued experiment is with its queue (kube.status.admission's words): suspended for a
    resize, or admitted (the stand-in admits at once); None without a queue."""
    if not spec.get("queue"):
        return None
    resizing = read_json(exp_dir / RESIZE)
    return kube_status.admission(None, [], str(resizing["agents"]) if resizing else None) or "Admitted"


def _objects(exp_dir: Path) -> list[dict[str, Any]]:
    return [o for o in yaml.safe_load_all((exp_dir / OBJECTS).read_text()) if o]


class _InPlace:
    """resize.py's in-place steps in containers: the learner takes the count from scale.json on its
    claim; then the actors' Job gets its completions and parallelism in objects.yaml, as `kubectl
    patch` would, and the run's controller starts the new indexes or stops the dropped ones."""

    def __init__(self, exp_dir: Path, spec: ExperimentSpec, plan: Plan) -> None:
        self.exp_dir, self.name, self.spec, self.plan = exp_dir, exp_dir.name, spec, plan
        self.learner_pods = spec.learner_pods
        self.actor = kube_render.object_names(self.name)["actor"]

    def problem(self, agents: int) -> str | None:
        per_pod = self.spec.agents_per_pod
        return resize.pods_problem(agents, per_pod) or workers_problem(
            self.spec, pod_split(agents, per_pod), "pod", f"agents_per_pod ({per_pod})"
        )

    def not_running(self) -> str | None:
        record = read_record(self.exp_dir)
        if "phase" in record:
            return f"is not running (phase {record['phase']})"
        return "has done its steps" if learner_metrics(self.plan).get("done") else None

    def tell_learner(self, agents: int) -> None:
        home.write_scale(claim_dir(self.plan), agents)

    def learner_took(self, agents: int) -> bool:
        metrics = learner_metrics(self.plan)
        return metrics.get("agents") == agents or bool(metrics.get("done"))

    def resize_actors(self, agents: int) -> str:
        objects = _objects(self.exp_dir)
        for obj in objects:
            if obj["kind"] == "Job" and obj["metadata"]["name"] == self.actor:
                obj["spec"]["completions"] = obj["spec"]["parallelism"] = agents // self.spec.agents_per_pod
        write_atomic(self.exp_dir / OBJECTS, kube_output.to_yaml(objects), PRIVATE)
        return f"{agents // self.spec.agents_per_pod} actor containers"

    def actors_run(self, agents: int) -> bool:
        latest = read_record(self.exp_dir)
        jobs = {j["job"]: j for j in latest.get("jobs") or []}
        return "phase" in latest or int(jobs.get(self.actor, {}).get("completions", -1)) == (
            agents // self.spec.agents_per_pod
        )


class _QueuedResize:
    """resize.py's steps in containers: RESIZE says it; suspending is the JobSet's `suspend` in
    objects.yaml (as Kueue's eviction sets it), which the run's controller takes (`_take_scale`:
    every pod stopped, the learner saves); remaking writes the new spec and objects, admitted,
    which the controller starts on the run's network."""

    def __init__(self, exp_dir: Path, spec: ExperimentSpec, objects: list[dict[str, Any]]) -> None:
        self.exp_dir, self.name, self.spec, self.objects = exp_dir, exp_dir.name, spec, objects

    def begin(self) -> bool:
        write_json_atomic(self.exp_dir / RESIZE, {"agents": self.spec.agents,
                                                  "learner_pods": self.spec.learner_pods})  # fmt: skip
        return True  # objects.yaml is replaced at once: the JobSet is never gone

    def suspend(self) -> None:
        objects = _suspended(_objects(self.exp_dir), True)
        write_atomic(self.exp_dir / OBJECTS, kube_output.to_yaml(objects), PRIVATE)

    def learner_pods(self) -> list[str]:
        record = read_record(self.exp_dir)
        if "phase" in record:
            raise LauncherError(f"experiment {self.name!r} ended ({record['phase']}) while suspended for a "
                                "resize; nothing to resume")  # fmt: skip
        return [p.name for p in plan_from_dict(record["plan"]).pods if p.role == "learner"
                and p.name not in set(record.get("handled") or ())]  # fmt: skip

    def remake(self) -> None:
        write_atomic(self.exp_dir / home.SPEC_FILE, self.spec.to_yaml())
        write_atomic(self.exp_dir / OBJECTS, kube_output.to_yaml(self.objects), PRIVATE)

    def end(self) -> None:
        (self.exp_dir / RESIZE).unlink(missing_ok=True)


# --- the controller -------------------------------------------------------------------------------


def save_run(exp_dir: Path, run: Run) -> None:
    """The run as its controller knows it: every pod started, the Jobs' state, the pods decided on."""
    record = read_record(exp_dir)
    record["plan"] = plan_to_dict(dataclasses.replace(run.plan, pods=tuple(run.started)))
    record.update(jobs=run.controller.to_list(), handled=sorted(run.handled))
    write_json_atomic(exp_dir / RECORD, record, PRIVATE)


def load_run(exp_dir: Path, record: dict[str, Any], engine: Engine) -> Run:
    plan = plan_from_dict(record["plan"])
    controller = JobController(plan.jobs, record.get("jobs"))
    return Run(plan, engine, started=plan.pods, controller=controller, handled=record.get("handled") or ())


def spawn_controller(exp_dir: Path) -> None:
    """A detached run's controller: `python -m surreal.orchestrator.containers.control EXP_DIR`, in
    a session of its own. It writes its pid into the record (so `delete` can stop it): this waits
    for that, and fails with the log's last line if it exits first."""
    (exp_dir / LOG_DIR).mkdir(exist_ok=True)
    with open(exp_dir / LOG_DIR / f"{CONTROLLER_LOG}.log", "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "surreal.orchestrator.containers.control", str(exp_dir)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    threading.Thread(target=proc.wait, name=f"reap-{proc.pid}", daemon=True).start()
    deadline = time.monotonic() + 60.0
    while read_record(exp_dir).get("controller_pid") != proc.pid:
        if proc.returncode is not None or time.monotonic() > deadline:
            tail = [line for line in read_log(exp_dir, CONTROLLER_LOG, lines=5) if line.strip()]
            raise ContainersError(f"the run's controller did not start: {tail[-1] if tail else 'no output'}")
        time.sleep(0.1)


def stop_controller(record: dict[str, Any], timeout: float = 600.0) -> None:
    """SIGTERM a detached run's controller (the process the record names, not another that got its
    pid) and wait until it has stopped its containers, each within its grace period, and exited."""
    pid, started = record.get("controller_pid"), record.get("controller_started")
    if not pid or "phase" in record:
        return
    try:
        proc = psutil.Process(int(pid))
        if started is not None and abs(proc.create_time() - float(started)) > 0.05:
            return  # the controller is gone and its pid reused
        proc.terminate()
        proc.wait(timeout=timeout)
    except psutil.NoSuchProcess:
        return
    except psutil.TimeoutExpired:
        raise ContainersError(
            f"the run's controller (pid {pid}) did not stop within {timeout:.0f} s"
        ) from None


def control(exp_dir: Path, run: Run, watch: Watcher | None) -> str:
    """Run the experiment's Jobs until the learner's Job has completed or failed, a container of
    a Deployment crash-loops, the containers or the experiment's folder are removed from elsewhere
    (`surreal delete`), or Ctrl-C/SIGTERM; then `_finish`. Returns the final phase."""
    phase, problem = "Failed", ""
    objects_seen = _mtime(exp_dir / OBJECTS)
    try:
        while True:
            run.check_crash_loops()
            scaled = (mtime := _mtime(exp_dir / OBJECTS)) != objects_seen
            if scaled:
                objects_seen = mtime
                _take_scale(exp_dir, run)
            if run.reconcile() or scaled:
                save_run(exp_dir, run)
            pods = run.pods(probe=False)
            if not exp_dir.exists() or (not run.suspended and all(_never_seen(p) for p in pods)):
                phase, problem = "Stopped", "its containers or its folder were removed meanwhile"
                break
            metrics = poll_learner_metrics(run.plan)
            if watch is not None:
                watch.tick(metrics)
            ended, problem = outcome(kube_status.role_ends(run.jobs(), run.job_failure, pods))
            if ended is not None:
                phase = ended.value
                break
            time.sleep(POLL_SECONDS)
    except KeyboardInterrupt:
        phase = "Stopped"
    except ContainersError as exc:
        problem = str(exc)
    finally:
        _finish(exp_dir, run, phase, problem)
    if problem:
        raise ContainersError(f"{problem} (the containers are removed; `surreal logs {exp_dir.name} POD`)")
    return phase


def _take_scale(exp_dir: Path, run: Run) -> None:
    """objects.yaml changed (`surreal scale`): the Jobs' completions as it now says, or for a queued
    experiment its JobSet suspended (the resize began) or made again and admitted (it ends)."""
    try:
        objects = _objects(exp_dir)
    except (OSError, yaml.YAMLError):
        return
    jobset = jobset_of(objects)
    if jobset is not None:
        if jobset["spec"].get("suspend"):
            if not run.suspended:
                run.suspend()
        elif run.suspended:
            run.resume(translate(objects, workdir=run.plan.workdir, run_id=run.plan.run_id))
        return
    for obj in objects:
        name = obj["metadata"]["name"]
        if obj["kind"] == "Job" and name in run.controller.jobs:
            wanted = int(obj["spec"]["completions"])
            if wanted != run.controller.state(name).completions:
                run.controller.scale(name, wanted)


def _finish(exp_dir: Path, run: Run, phase: str, problem: str) -> None:
    """After a run that ended by itself, give the workers' pods END_WAIT_SECONDS to end on their
    own; stop what still runs within its grace period; keep every container's log and the pods'
    and Jobs' last state; then remove the containers and the network (always, and deaf to further
    signals while it does). The claim stays."""
    with _shielded():
        run.stopping = True  # nothing is replaced or started from here on
        components: list[dict[str, Any]] = []
        job_rows: list[dict[str, Any]] = []
        stopped: list[str] = []
        try:
            if exp_dir.exists():
                deadline = time.monotonic() + (END_WAIT_SECONDS if phase == "Succeeded" else 0.0)
                while _running_job_pods(run) and time.monotonic() < deadline:
                    run.reconcile()
                    time.sleep(POLL_SECONDS)
                still_running = _running_job_pods(run)
                stopped = [p.name for p in still_running]
                for pod in still_running:
                    run.stop_pod(pod)
                run.reconcile()
                save_run(exp_dir, run)
                components = kube_status.components(run.pods(probe=False))
                job_rows = kube_status.jobs_summary(run.jobs())
                (exp_dir / LOG_DIR).mkdir(exist_ok=True)
                for pod in run.started:
                    (exp_dir / LOG_DIR / f"{pod.name}.log").write_text(run.logs(pod))
        except (LauncherError, OSError) as exc:
            problem = problem or f"could not keep the logs: {exc}"
        finally:
            run.close(keep_volumes=True)
        if exp_dir.exists():
            record = read_record(exp_dir)
            record.update(phase=phase, problem=problem, ended_at=time.time(), components=components,
                          job_rows=job_rows, stopped_at_end=stopped)  # fmt: skip
            write_json_atomic(exp_dir / RECORD, record, PRIVATE)


def _running_job_pods(run: Run) -> list[PodRun]:
    infos = {c["Name"]: c for c in run.engine.inspect(p.name for p in run.started if run.is_job_pod(p))}
    return [p for p in run.started if (infos.get(p.name) or {}).get("State", {}).get("Running")]


def _mtime(path: Path) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _pod_view(name: str, role: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"surreal.io/component": role}}, "status": {}}


def _engine_logs(engine: Engine, pod: str, *, follow: bool, lines: int | None) -> Iterator[str]:
    argv = [
        engine.name,
        "logs",
        *(["--follow"] if follow else []),
        *(["--tail", str(lines)] if lines else []),
        pod,
    ]
    proc = subprocess.Popen(argv, env=engine.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            yield line.rstrip("\n")
    finally:
        proc.kill()
        proc.wait()


def _remove_tree(path: Path, engine: Engine) -> None:
    """Remove an experiment's folder; files that rootless podman's containers wrote belong to
    other ids of the user namespace, so what plain removal leaves goes through `podman unshare`."""
    try:
        home.remove_dir(path)
    except LauncherError:
        if engine.name != "podman":
            raise
        engine("unshare", "rm", "-rf", "--one-file-system", "--", str(path), check=False)
        if os.path.lexists(path):
            home.remove_dir(path)  # says what is left


def _never_seen(pod: dict[str, Any]) -> bool:
    """A pod whose container the engine does not know (gone, or never started)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    return bool(((statuses[0].get("state") or {}).get("waiting") or {}).get("reason") == "ContainerCreating")


@contextmanager
def _signals(handler: Any, *signals: signal.Signals) -> Iterator[None]:
    """`handler` for `signals` meanwhile, in the main thread (the only one that may set them)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, before in old.items():
            signal.signal(sig, before)


def _shielded() -> Any:
    """Ctrl-C, SIGTERM and SIGHUP are ignored while what was started is being removed: a second
    Ctrl-C must not leave containers behind."""
    return _signals(signal.SIG_IGN, signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _interrupts() -> Any:
    """SIGTERM (and SIGHUP) raise KeyboardInterrupt in the main thread, as Ctrl-C does, so what
    was started is removed however the CLI is stopped."""
    return _signals(_interrupt, signal.SIGTERM, signal.SIGHUP)


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")

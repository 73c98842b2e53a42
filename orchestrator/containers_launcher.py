"""The containers backend: an experiment's rendered Kubernetes objects run as real containers on
podman (or Docker where a daemon answers), no cluster needed, with the local backend's commands.

The experiment lives in `$SURREAL_HOME/experiments/NAME/` like a local one: spec.yaml, objects.yaml
(0600: the Secret's token is in it), containers.json (the engine, the plan that was started and,
once the run ended, its final phase and components), volumes/ (the learner's claim: status.json,
checkpoints, TensorBoard events), and logs/ (every container's log, kept when the run ends).

A foreground `create` waits for the learner to report the run done, keeps the logs, and removes the
containers and their network (on Ctrl-C or SIGTERM too, then the phase is Stopped); the claim stays,
so `status`, `logs`, `tensorboard` and `plot` work after the end. A detached run keeps its
containers until `surreal delete`, as pods on a cluster do today.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from surreal.orchestrator import experiments as exps
from surreal.orchestrator import kube_output, kube_render, kube_status
from surreal.orchestrator.containers_plan import (
    ContainersError,
    Plan,
    PodRun,
    plan_from_dict,
    plan_to_dict,
    translate,
)
from surreal.orchestrator.containers_run import Engine, Run, engine_for, make_host_path, remove_run
from surreal.orchestrator.home import HomeLauncher, tail_log, wait_until
from surreal.orchestrator.launcher import Launched, LauncherError, Placement, UsageError, Watcher
from surreal.orchestrator.supervisor import LOG_DIR, write_json_atomic
from surreal.spec import ExperimentSpec, load_yaml_file

RECORD = "containers.json"
OBJECTS = "objects.yaml"
POLL_SECONDS = 1.0  # each look at the containers is a `podman inspect`
STOP_SECONDS = 10  # SIGTERM -> SIGKILL when containers are removed (`rm --time`)
SCALE_WAIT_SECONDS = 60.0


class ContainersLauncher(HomeLauncher):
    backend = "containers"

    def engine(self) -> Engine:
        """The engine, with podman's settings in $SURREAL_HOME (ContainersError if there is none)."""
        self.home.mkdir(parents=True, exist_ok=True)
        return engine_for(self.home)

    # --- create -----------------------------------------------------------------------------

    def dry_run(self, spec: ExperimentSpec, output: str, placement: Placement) -> str:
        self.check_placement(placement)
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
            objects = kube_render.render(spec, token=kube_render.new_token())
        except kube_render.RenderError as exc:
            raise UsageError(str(exc)) from None
        image = kube_render.kube_spec(spec).image
        if not engine.image_exists(image):
            raise ContainersError(
                f"image {image} is not in {engine.name}'s store (build it: make image IMAGE={image})"
            )
        plan = translate(objects, workdir=exps.experiment_dir(self.home, spec.name))

        def write(staging: Path) -> None:
            (staging / OBJECTS).touch(mode=0o600)
            (staging / OBJECTS).write_text(kube_output.to_yaml(objects))
            write_json_atomic(staging / RECORD, {"engine": engine.name, "plan": plan_to_dict(plan)})

        exp_dir = exps.create_dir(spec, self.home, write)
        run = Run(plan, engine)
        with _interrupts():  # from here on SIGTERM and SIGHUP end the wait as Ctrl-C does
            try:
                run.start()
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
            return Launched(spec.name, "", phase=self._wait(exp_dir, run, watch))

    def _wait(self, exp_dir: Path, run: Run, watch: Watcher | None) -> str:
        """Until the learner reports the run done, a container crash-loops, the containers or the
        experiment's folder are removed from elsewhere (`surreal delete`), or Ctrl-C/SIGTERM; then
        keep the logs and remove the containers. Returns the final phase."""
        phase, problem = "Failed", ""
        try:
            while True:
                run.check_crash_loops()
                pods = run.pods(probe=False)
                if not exp_dir.exists() or all(_never_seen(p) for p in pods):
                    phase, problem = "Stopped", "its containers or its folder were removed meanwhile"
                    break
                metrics = learner_metrics(run.plan)
                if watch is not None:
                    watch.tick(metrics)
                if (now := kube_status.phase(pods, metrics)) in ("Succeeded", "Failed"):
                    phase = now
                    break
                time.sleep(POLL_SECONDS)
        except KeyboardInterrupt:
            phase = "Stopped"
        except ContainersError as exc:
            problem = str(exc)
        finally:
            self._finish(exp_dir, run, phase, problem)
        if problem:
            raise ContainersError(
                f"{problem} (the containers are removed; `surreal logs {exp_dir.name} POD`)"
            )
        return phase

    def _finish(self, exp_dir: Path, run: Run, phase: str, problem: str) -> None:
        """Keep every container's log and the components' last state, then remove the containers
        and the network (always, and deaf to further signals while it does); the claim stays."""
        with _shielded():
            components: list[dict[str, Any]] = []
            try:
                if exp_dir.exists():
                    # actors that `scale` added since the start are in the record's plan
                    run.started = list(plan_from_dict(read_record(exp_dir)["plan"]).pods)
                    components = kube_status.components(run.pods(probe=False))
                    if phase in ("Succeeded", "Stopped"):
                        components = [dict(c, state=phase) for c in components]
                    (exp_dir / LOG_DIR).mkdir(exist_ok=True)
                    for pod in run.started:
                        (exp_dir / LOG_DIR / f"{pod.name}.log").write_text(run.logs(pod))
            except (LauncherError, OSError) as exc:
                problem = problem or f"could not keep the logs: {exc}"
            finally:
                run.close(keep_volumes=True)
            if exp_dir.exists():
                record = read_record(exp_dir)
                record.update(phase=phase, problem=problem, ended_at=time.time(), components=components)
                write_json_atomic(exp_dir / RECORD, record)

    # --- observation -----------------------------------------------------------------------

    def status_of(self, exp_dir: Path) -> dict[str, Any]:
        record = read_record(exp_dir)
        plan = plan_from_dict(record["plan"])
        spec = load_yaml_file(exp_dir / exps.SPEC_FILE)
        metrics = learner_metrics(plan)
        if "phase" in record:  # ended: what was kept
            out = kube_status.status(spec, [], metrics, backend=self.backend)
            out.update(phase=record["phase"], components=record["components"])
            out.pop("actor_pods", None)
            if record.get("problem"):
                out["problem"] = record["problem"]
            return out
        pods = Run(plan, self._engine_of(record), started=plan.pods).pods(probe=False)
        return kube_status.status(spec, pods, metrics, backend=self.backend)

    def logs_of(
        self, exp_dir: Path, component: str, *, follow: bool, lines: int | None, previous: bool
    ) -> Iterator[str]:
        record = read_record(exp_dir)
        plan = plan_from_dict(record["plan"])
        if "phase" in record:
            pods = [_pod_view(c["name"], c["role"]) for c in record["components"]]
            pod, _ = kube_status.pick_pod(pods, component, exp_dir.name)
            return tail_log(exp_dir, pod, lines=lines)
        pods = [_pod_view(p.name, p.role) for p in plan.pods]
        pod, _ = kube_status.pick_pod(pods, component, exp_dir.name)
        return _engine_logs(self._engine_of(record), pod, follow=follow, lines=lines)

    def tb_dir(self, exp_dir: Path) -> Path:
        return claim_dir(plan_from_dict(read_record(exp_dir)["plan"])) / "tb"

    # --- change -----------------------------------------------------------------------------

    def scale_of(self, exp_dir: Path, agents: int) -> str:
        """The learner takes the count first (scale.json on its claim), then actor containers are
        started, or the newest ones stopped (SIGTERM, then SIGKILL after STOP_SECONDS)."""
        name = exp_dir.name
        record = read_record(exp_dir)
        if "phase" in record:
            raise LauncherError(
                f"experiment {name!r} is not running (phase {record['phase']}); nothing to scale"
            )
        spec = load_yaml_file(exp_dir / exps.SPEC_FILE)
        per_pod = int(spec.get("agents_per_pod") or 1)
        if agents % per_pod:
            raise LauncherError(
                f"--agents must be a positive multiple of agents_per_pod ({per_pod}), got {agents}"
            )
        engine = self._engine_of(record)
        plan = plan_from_dict(record["plan"])
        if learner_metrics(plan).get("done"):
            raise LauncherError(f"experiment {name!r} has done its steps; nothing to scale")
        exps.write_scale(claim_dir(plan), agents)
        wait_until(
            f"the learner of {name!r} to take {agents} agents (scale.json holds the count)",
            lambda: learner_metrics(plan).get("agents") == agents or bool(learner_metrics(plan).get("done")),
            SCALE_WAIT_SECONDS,
        )
        objects = [o for o in yaml.safe_load_all((exp_dir / OBJECTS).read_text()) if o]
        actor = kube_render.object_names(name)["actor"]
        for obj in objects:
            if obj["kind"] == "Deployment" and obj["metadata"]["name"] == actor:
                obj["spec"]["replicas"] = agents // per_pod
        actors = [p for p in plan.pods if p.workload == actor]
        pods = translate(objects, workdir=plan.workdir, run_id=plan.run_id).pods
        wanted = [p for p in pods if p.workload == actor]
        kept, started = list(actors), []
        try:
            for pod in wanted[len(actors) :]:
                for host in pod.paths:
                    make_host_path(host)
                engine("run", "--detach", *pod.args, pod.image, *pod.command)
                started.append(pod)
            gone = actors[len(wanted) :]
            if gone:
                run = Run(plan, engine, started=gone)
                for pod in gone:  # their logs stay readable, as at the end of a run
                    (exp_dir / LOG_DIR).mkdir(exist_ok=True)
                    (exp_dir / LOG_DIR / f"{pod.name}.log").write_text(run.logs(pod))
                engine("rm", "--force", "--time", str(STOP_SECONDS), *(p.name for p in gone), timeout=120)
                kept = actors[: len(wanted)]
        finally:  # whatever was started is recorded, so `delete` and the next scale see it
            latest = read_record(exp_dir)
            others = [p for p in plan.pods if p.workload != actor]
            latest["plan"] = plan_to_dict(dataclasses.replace(plan, pods=tuple(others + kept + started)))
            write_json_atomic(exp_dir / RECORD, latest)
            (exp_dir / OBJECTS).write_text(kube_output.to_yaml(objects))
        return f"experiment {name!r}: {agents} agents in {len(kept) + len(started)} actor containers"

    def delete_of(self, exp_dir: Path) -> None:
        """Remove the run's containers (checked gone), then the folder."""
        record = read_record(exp_dir)
        engine = self._engine_of(record)
        remove_run(engine, plan_from_dict(record["plan"]).run_id)
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
    try:
        data = json.loads((exp_dir / RECORD).read_text())
    except (OSError, ValueError) as exc:
        raise ContainersError(f"experiment {exp_dir.name!r}: unreadable {RECORD} ({exc})") from None
    try:
        if not plan_from_dict(data["plan"]).run_id:
            raise ValueError("an empty run id")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ContainersError(
            f"experiment {exp_dir.name!r}: {RECORD} is not a plan surreal wrote ({exc!r})"
        ) from None
    return dict(data)


def claim_dir(plan: Plan) -> Path:
    """The learner's claim on this machine (what the StatefulSet's volumeClaimTemplate becomes)."""
    return plan.workdir / "volumes" / kube_render.object_names(plan.experiment)["claim"]


def learner_metrics(plan: Plan) -> dict[str, Any]:
    """What the learner writes into its claim about once a second (status.json)."""
    return exps.read_metrics(claim_dir(plan))


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
    shutil.rmtree(path, ignore_errors=True)
    if path.exists() and engine.name == "podman":
        engine("unshare", "rm", "-rf", str(path), check=False)


def _never_seen(pod: dict[str, Any]) -> bool:
    """A pod whose container the engine does not know (gone, or never started)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    return bool(((statuses[0].get("state") or {}).get("waiting") or {}).get("reason") == "ContainerCreating")


@contextmanager
def _shielded() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP are ignored while what was started is being removed: a second
    Ctrl-C must not leave containers behind."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


@contextmanager
def _interrupts() -> Iterator[None]:
    """SIGTERM (and SIGHUP) raise KeyboardInterrupt in the main thread, as Ctrl-C does, so what
    was started is removed however the CLI is stopped."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    old = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


__all__ = ["ContainersLauncher", "PodRun", "claim_dir", "learner_metrics", "read_record"]

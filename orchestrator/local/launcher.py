"""The local backend: an experiment's components as supervised subprocesses on this machine."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from surreal.orchestrator import home, resize
from surreal.orchestrator.home_launcher import HomeLauncher, read_log
from surreal.orchestrator.launcher import Launched, LauncherError, Placement, UsageError, Watcher
from surreal.orchestrator.local import experiment as exps
from surreal.orchestrator.local import processes as local
from surreal.orchestrator.program import ACTOR_ROLE, LOCAL_KNOB, local_split, rescaled, workers_problem
from surreal.orchestrator.status import TERMINAL_PHASES
from surreal.spec import ExperimentSpec

# How long `scale` waits for the supervisor to run the new actor group and the learner to report
# the new count.
SCALE_WAIT_SECONDS = 60.0


class LocalLauncher(HomeLauncher):
    backend = "local"

    def dry_run(self, spec: ExperimentSpec, output: str, placement: Placement) -> str:
        self.check_placement(placement)
        home.refuse_existing(self.home, spec.name)
        if output == "helm-values":
            raise UsageError("-o helm-values needs --backend kube")
        exps.checked_split(spec)  # what create would refuse, a dry run refuses
        return json.dumps(spec.to_dict(), indent=2) + "\n" if output == "json" else spec.to_yaml()

    def create(
        self, spec: ExperimentSpec, *, detach: bool, placement: Placement, watch: Watcher | None = None
    ) -> Launched:
        self.check_placement(placement)
        exp_dir, program = exps.prepare(spec, self.home)
        name = spec.name
        if detach:
            try:
                pid = exps.run_detached(exp_dir)
            except RuntimeError as exc:
                exps.delete(self.home, name)
                last = str(exc).strip().splitlines()[-1] if str(exc).strip() else "no output"
                raise LauncherError(f"experiment {name!r} could not start: {last}") from None
            return Launched(
                name, f"experiment {name!r} started (supervisor pid {pid}); `surreal status {name}`"
            )
        if watch is not None:
            watch.started(
                f"experiment {name!r}: {spec.algo} on {spec.env}, {spec.agents} agents in "
                f"{len(program.group(ACTOR_ROLE))} actor processes, {spec.steps:,} steps; files in {exp_dir}"
            )
        tick = (lambda: watch.tick(home.poll_metrics(exp_dir))) if watch is not None else None
        try:
            exps.run_foreground(exp_dir, program, on_tick=tick)
        except KeyboardInterrupt:  # before the supervisor took the signals: nothing ran, keep nothing
            if local.read_state(exp_dir) is None:
                exps.delete(self.home, name)
            raise
        return Launched(name, "", phase=exps.status(exp_dir)["phase"])

    def status_of(self, exp_dir: Path) -> dict[str, Any]:
        return exps.status(exp_dir)

    def logs_of(
        self, exp_dir: Path, component: str, *, follow: bool, lines: int | None, previous: bool
    ) -> Iterator[str]:
        return read_log(exp_dir, component, follow=follow, lines=lines,
                        running=lambda: local.is_alive(local.read_state(exp_dir)))  # fmt: skip

    def scale_of(self, exp_dir: Path, agents: int, learner_pods: int | None) -> str:
        return resize.scale_in_place(_InPlace(exp_dir), agents, learner_pods, SCALE_WAIT_SECONDS)

    def delete_of(self, exp_dir: Path) -> None:
        exps.delete(self.home, exp_dir.name)

    def tb_dir(self, exp_dir: Path) -> Path:
        return exp_dir / "tb"


class _InPlace:
    """resize.py's in-place steps here: the count in scale.json, which the learner follows, then a
    new actor group in program.json, which the supervisor runs (stopping, starting or restarting
    only actors)."""

    learner_pods = 1

    def __init__(self, exp_dir: Path) -> None:
        self.exp_dir, self.name = exp_dir, exp_dir.name
        self.spec = home.load_spec(exp_dir)
        self.written: tuple[int, set[str]] = (0, set())  # program.json's mtime, its actors

    def problem(self, agents: int) -> str | None:
        return workers_problem(
            self.spec,
            local_split(agents, learners=self.spec.learners, per_worker=self.spec.agents_per_pod),
            "process",
            LOCAL_KNOB,
        )

    def not_running(self) -> str | None:
        state = local.read_state(self.exp_dir)
        phase = local.current_phase(state)
        running = phase not in TERMINAL_PHASES and local.is_alive(state)
        return None if running else f"is not running (phase {phase})"

    def tell_learner(self, agents: int) -> None:
        home.write_scale(self.exp_dir, agents)

    def learner_took(self, agents: int) -> bool:
        ended = exps.status(self.exp_dir)["phase"] != "Running"
        return home.read_metrics(self.exp_dir).get("agents") == agents or ended

    def resize_actors(self, agents: int) -> str:
        try:
            program = rescaled(
                local.load_program(self.exp_dir),
                local_split(agents, learners=self.spec.learners, per_worker=self.spec.agents_per_pod),
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise LauncherError(
                f"experiment {self.name!r}: its program.json cannot be scaled ({exc})"
            ) from None
        local.save_program(program, self.exp_dir)
        actors = {c.name for c in program.group(ACTOR_ROLE)}
        self.written = (os.stat(self.exp_dir / local.PROGRAM_FILE).st_mtime_ns, actors)
        return f"{len(actors)} actor processes"

    def actors_run(self, agents: int) -> bool:
        state = local.read_state(self.exp_dir) or {}
        if local.current_phase(state) in TERMINAL_PHASES:
            return True
        mtime, actors = self.written
        if state.get("program_mtime_ns") != mtime:  # the supervisor has not taken it yet
            return False
        now = {c["name"]: c["state"] for c in state.get("components", []) if c["role"] == ACTOR_ROLE}
        return set(now) == actors and all(s == "Running" for s in now.values())

"""Experiment lifecycle on the local backend: create, list, status, logs, delete.

An experiment lives in `HOME/experiments/NAME/`: spec.yaml, token (0600), program.json, state.json
(the supervisor's), status.json (the learner's), logs/, checkpoints/, tb/. `create` assembles the
directory under a temporary name and renames it into place, so a failed create leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from surreal.algorithms.common.scale import SCALE_FILE, read_scale
from surreal.orchestrator import local
from surreal.orchestrator.components import Program
from surreal.orchestrator.launcher import LauncherError
from surreal.orchestrator.program import Target, fragment_problem, local_split, make_program
from surreal.orchestrator.sched_slice import slice_ms_from_env
from surreal.orchestrator.supervisor import write_json_atomic
from surreal.spec import ExperimentSpec

SPEC_FILE = "spec.yaml"
TOKEN_FILE = "token"
STATUS_FILE = "status.json"
METRIC_FIELDS = (
    "env_steps", "updates", "policy_version", "episodes", "train_return", "eval_return",
    "best_eval_return", "steps_per_second", "elapsed_seconds",
)  # fmt: skip


# Reported by the ES master only: logical agents whose results arrived, the result ledger, how
# many versions old the results of recent updates were, rounds updated without all their pairs,
# and the hand-out sizes for the agent count.
ES_METRICS = (
    "agents_reporting", "results_accepted", "results_rejected", "staleness", "short_rounds",
    "pairs_per_update", "round_pairs", "pairs_per_agent", "max_staleness", "step_size",
)  # fmt: skip
# Passed through when the learner reports them: what it dropped or refused, and why.
EXTRA_METRICS = (
    "dropped_fragments", "connected_actors", "rejected_fragments", "skipped_updates",
    "wire_rejections", "checkpoint_version", "checkpoint_age_seconds", "learners", "group_restarts",
    *ES_METRICS,
)  # fmt: skip


class ExperimentError(LauncherError):
    """A lifecycle operation that cannot be done; the message says why."""


class CreateRefused(ExperimentError):
    """A create that cannot be right: the name is taken, a setting is malformed (exit code 2)."""

    exit_code = 2


def experiments_root(home: Path) -> Path:
    return home / "experiments"


def experiment_dir(home: Path, name: str) -> Path:
    return experiments_root(home) / name


def existing_dir(home: Path, name: str) -> Path:
    path = experiment_dir(home, name)
    if not path.is_dir():
        raise ExperimentError(f"no experiment named {name!r} in {experiments_root(home)}")
    return path


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free now on 127.0.0.1."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def user_import_path() -> tuple[str, ...]:
    """Where this shell imports a user's module from: PYTHONPATH's folders, then the working
    directory (as `python -m` would). `create` validates the environment with these on sys.path and
    components get them (SURREAL_IMPORT_PATH), so `--env mymod:MyEnv-v0` works from mymod's folder."""
    entries = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    paths = [str(Path(p).resolve()) for p in (*entries, os.getcwd())]
    return tuple(dict.fromkeys(paths))


def prepare(spec: ExperimentSpec, home: Path) -> tuple[Path, Program]:
    """Create the experiment directory with everything needed to run it; return it and the program."""
    final = experiment_dir(home, spec.name)
    try:
        slice_ms_from_env()  # read again by the supervisor; refuse a bad value before creating
    except ValueError as exc:
        raise CreateRefused(str(exc)) from None
    target = Target(
        spec_path=str(final / SPEC_FILE),
        learner_addr=",".join(f"127.0.0.1:{port}" for port in free_ports(spec.learners)),
        bind_host="127.0.0.1",
        exp_dir=str(final),
        command=(sys.executable, "-m", "surreal"),
        token_file=str(final / TOKEN_FILE),
        import_path=user_import_path(),
    )
    split = local_split(spec.agents, learners=spec.learners)
    problem = fragment_problem(spec, split, "--agents (this machine runs one actor process per core)")
    if problem is not None:
        raise CreateRefused(problem)
    program = make_program(spec, target, split)

    def write(staging: Path) -> None:
        token_path = staging / TOKEN_FILE
        token_path.touch(mode=0o600)
        token_path.write_text(secrets.token_urlsafe(32))
        local.save_program(program, staging)

    return create_dir(spec, home, write), program


def create_dir(spec: ExperimentSpec, home: Path, write: Callable[[Path], None]) -> Path:
    """`HOME/experiments/NAME/` with spec.yaml and what `write` puts in it, made under a temporary
    name and renamed into place: a failed create leaves nothing, and of two concurrent creates of
    one name exactly one wins."""
    final = experiment_dir(home, spec.name)
    if final.exists():
        raise CreateRefused(
            f"experiment {spec.name!r} already exists in {experiments_root(home)} "
            f"(`surreal delete {spec.name}` removes it)"
        )
    experiments_root(home).mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{spec.name}.", dir=experiments_root(home)))
    try:
        (staging / SPEC_FILE).write_text(spec.to_yaml())
        write(staging)
        try:
            # rename(2) onto an existing non-empty directory fails
            os.rename(staging, final)
        except OSError:
            raise CreateRefused(f"experiment {spec.name!r} already exists") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final


def run_foreground(exp_dir: Path, program: Program, on_tick: Callable[[], None] | None) -> int:
    supervisor = local.Supervisor(program, exp_dir)
    return local.exit_code_for(supervisor.run(on_tick=on_tick))


def run_detached(exp_dir: Path) -> int:
    return local.spawn_detached(exp_dir)


def write_scale(exp_dir: Path, agents: int) -> None:
    """The agent count the learner in `exp_dir` follows from now on (scale.SCALE_FILE)."""
    write_json_atomic(exp_dir / SCALE_FILE, {"agents": agents})


def scaled_agents(exp_dir: Path, spec_agents: Any) -> Any:
    """The agents the experiment runs now: as last scaled, else as created."""
    return read_scale(exp_dir) or spec_agents


def read_metrics(exp_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((exp_dir / STATUS_FILE).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def status(exp_dir: Path) -> dict[str, Any]:
    """The contract's status object: spec identity, phase, learner metrics, components."""
    from surreal.spec import load_yaml_file

    spec = load_yaml_file(exp_dir / SPEC_FILE)
    state = local.read_state(exp_dir)
    metrics = read_metrics(exp_dir)
    out: dict[str, Any] = {
        "name": spec.get("name", exp_dir.name),
        "algo": spec.get("algo"),
        "env": spec.get("env"),
        "backend": spec.get("backend", "local"),
        "agents": metrics.get("agents") or scaled_agents(exp_dir, spec.get("agents")),
        "target_steps": spec.get("steps"),
        "phase": local.current_phase(state),
    }
    for key in METRIC_FIELDS:
        out[key] = metrics.get(key)
    for key in EXTRA_METRICS:
        if key in metrics:
            out[key] = metrics[key]
    out["components"] = [
        {
            "name": c["name"],
            "role": c["role"],
            "state": c["state"],
            "restarts": c["restarts"],
        }
        for c in (state or {}).get("components", [])
    ]
    return out


def delete(home: Path, name: str) -> None:
    path = existing_dir(home, name)
    local.stop_experiment(path)
    shutil.rmtree(path)

"""Experiment lifecycle on the local backend: create, list, status, logs, delete.

An experiment lives in `HOME/experiments/NAME/`: spec.yaml, token (0600), program.json, state.json
(the supervisor's), status.json (the learner's), logs/, checkpoints/, tb/. `create` assembles the
directory under a temporary name and renames it into place, so a failed create leaves nothing behind.
"""

from __future__ import annotations

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
from surreal.orchestrator.launcher import CorruptFile, LauncherError, read_json
from surreal.orchestrator.program import LOCAL_KNOB, Target, local_split, make_program, workers_problem
from surreal.orchestrator.sched_slice import slice_ms_from_env
from surreal.orchestrator.supervisor import write_json_atomic
from surreal.spec import ExperimentSpec, SpecError, load_spec_file, load_yaml_file, validate_name

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


class NameRefused(ExperimentError):
    """A NAME that is not an experiment name (exit code 2): refused before anything is touched."""

    exit_code = 2


# What a folder surreal made holds from its first moment on (create writes spec.yaml first, and the
# other files of each backend after it): a folder with none of them is not an experiment.
EXPERIMENT_FILES = (SPEC_FILE, TOKEN_FILE, STATUS_FILE, "state.json", "program.json", "containers.json",
                    "objects.yaml", "logs", "tb", "checkpoints")  # fmt: skip


def experiments_root(home: Path) -> Path:
    return home / "experiments"


def experiment_dir(home: Path, name: str) -> Path:
    """`HOME/experiments/NAME`, for a NAME that passes the rule `create` applies (spec.validate_name):
    one path component that is a Kubernetes name, so never '..', '.', 'a/b' or an absolute path."""
    try:
        validate_name(name)
    except SpecError as exc:
        raise NameRefused(str(exc)) from None
    return experiments_root(home) / name


def existing_dir(home: Path, name: str) -> Path:
    """The folder of experiment NAME, checked to be one: a real folder (not a symbolic link, which
    could lead anywhere) directly inside the experiments folder, holding files surreal writes."""
    path = experiment_dir(home, name)
    problem = folder_problem(home, path)
    if problem is not None:
        raise ExperimentError(problem)
    return path


def folder_problem(home: Path, path: Path) -> str | None:
    """Why `path` is not an experiment folder surreal may read or remove, or None."""
    root = experiments_root(home)
    if not os.path.lexists(path):
        return f"no experiment named {path.name!r} in {root}"
    if path.is_symlink():
        return (f"{path} is a symbolic link (to {os.readlink(path)}), not an experiment folder: "
                "surreal leaves it and what it points to alone")  # fmt: skip
    if not path.is_dir():
        return f"{path} is not a folder, so not an experiment: surreal leaves it alone"
    if path.resolve().parent != root.resolve():
        return f"{path} lies outside {root}: surreal leaves it alone"
    if not any(os.path.lexists(path / f) for f in EXPERIMENT_FILES):
        return (f"{path} holds none of the files of an experiment ({', '.join(EXPERIMENT_FILES)}): "
                "surreal leaves it alone")  # fmt: skip
    return None


def load_spec(exp_dir: Path) -> ExperimentSpec:
    """The experiment's spec, checked as every component checks it at start; CorruptFile naming
    the file when it is not one."""
    path = exp_dir / SPEC_FILE
    try:
        return load_spec_file(path)
    except SpecError as exc:
        raise CorruptFile(path, str(exc).replace(f"spec file {str(path)!r}: ", "")) from None


def read_spec(exp_dir: Path) -> dict[str, Any]:
    """The experiment's spec.yaml as a mapping; CorruptFile naming it when it is missing or is not
    a spec (its full check is load_spec_file's, which components run)."""
    path = exp_dir / SPEC_FILE
    if not os.path.lexists(path):
        raise CorruptFile(path, "missing (the experiment's spec; `surreal delete` still removes it)")
    try:
        data = load_yaml_file(path, "spec file")
    except SpecError as exc:
        raise CorruptFile(path, f"corrupt: {exc}".replace(f" {str(path)!r}", "")) from None
    for key, kind in (("name", str), ("algo", str), ("env", str)):
        if not isinstance(data.get(key), kind):
            raise CorruptFile(path, f"corrupt: {key} is {data.get(key)!r}, not what surreal wrote")
    return data


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


def checked_split(spec: ExperimentSpec) -> list[int]:
    """The agents of each local actor process, refused (CreateRefused) where they could not run."""
    split = local_split(spec.agents, learners=spec.learners)
    problem = workers_problem(spec, split, "process", LOCAL_KNOB)
    if problem is not None:
        raise CreateRefused(problem)
    return split


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
    program = make_program(spec, target, checked_split(spec))

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
    if os.path.lexists(final):  # a symbolic link by that name too: never replaced, never followed
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
    """What the learner last wrote to status.json ({} before its first write); CorruptFile when
    the file is not what it writes."""
    return read_json(exp_dir / STATUS_FILE) or {}


def poll_metrics(exp_dir: Path) -> dict[str, Any]:
    """read_metrics for a loop that must go on (a progress line, a controller): a corrupt file
    reads as no news, and the commands that show it name it."""
    try:
        return read_metrics(exp_dir)
    except CorruptFile:
        return {}


def status(exp_dir: Path) -> dict[str, Any]:
    """The contract's status object: spec identity, phase, learner metrics, components."""
    spec = read_spec(exp_dir)
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
    """Stop what runs of the experiment and remove its folder, whatever state its files are in."""
    path = existing_dir(home, name)
    try:
        local.stop_experiment(path)
    except CorruptFile:
        pass  # state.json cannot say which processes are its: stop_strays finds them all the same
    local.stop_strays(path)
    remove_dir(path)


def remove_dir(path: Path) -> None:
    """Remove an experiment's folder. Symbolic links inside are removed, never followed; folders
    the user made read-only are made writable first (they are the user's own). One ExperimentError
    names what could not be removed."""
    try:
        shutil.rmtree(path)
        return
    except FileNotFoundError:
        return
    except OSError:
        pass
    _make_writable(path)
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        what = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(path) else ""
        raise ExperimentError(f"cannot remove {path}: {exc.strerror or exc}{what}") from None


def _make_writable(path: Path) -> None:
    """Give the owner rwx on every folder in the tree (never through a symbolic link)."""
    stack = [str(path)]
    while stack:
        top = stack.pop()
        if os.path.islink(top):
            continue
        try:
            os.chmod(top, os.stat(top).st_mode | 0o700)
            with os.scandir(top) as entries:
                stack.extend(e.path for e in entries if e.is_dir(follow_symlinks=False))
        except OSError:
            continue

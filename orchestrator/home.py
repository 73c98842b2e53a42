"""The experiment home on this machine, `$SURREAL_HOME/experiments/NAME/`, which the local and the
containers backends share: names and folders, the files every experiment has (spec.yaml, token,
status.json, logs/), creating one whole or not at all, and removing one whatever state it is in."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import psutil

from surreal.orchestrator.files import read_json, write_json_atomic
from surreal.orchestrator.launcher import CorruptFile, LauncherError
from surreal.runtime.offpolicy.replay import DELETING_FILE
from surreal.runtime.scale import SCALE_FILE
from surreal.spec import ExperimentSpec, SpecError, load_spec_file, load_yaml_file, validate_name

LOG_DIR = "logs"
SPEC_FILE = "spec.yaml"
TOKEN_FILE = "token"
STATUS_FILE = "status.json"


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


def home_dir() -> Path:
    """This machine's experiment home: $SURREAL_HOME, else ~/.surreal."""
    return Path(os.environ.get("SURREAL_HOME") or Path.home() / ".surreal")


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
        where = f"spec file {str(path)!r}"
        problem = str(exc).replace(f" in {where}", "").replace(f"{where} is ", "").replace(f"{where} ", "")
        raise CorruptFile(path, f"corrupt: {problem}") from None
    for key, kind in (("name", str), ("algo", str), ("env", str)):
        if not isinstance(data.get(key), kind):
            raise CorruptFile(path, f"corrupt: {key} is {data.get(key)!r}, not what surreal wrote")
    return data


def user_import_path() -> tuple[str, ...]:
    """Where this shell imports a user's module from: PYTHONPATH's folders, then the working
    directory (as `python -m` would). `create` validates the environment with these on sys.path and
    components get them (SURREAL_IMPORT_PATH), so `--env mymod:MyEnv-v0` works from mymod's folder."""
    entries = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    paths = [str(Path(p).resolve()) for p in (*entries, os.getcwd())]
    return tuple(dict.fromkeys(paths))


def refuse_existing(home: Path, name: str) -> Path:
    """The folder a new experiment `name` gets, or CreateRefused when one is there: what create
    refuses, its dry run refuses too."""
    final = experiment_dir(home, name)
    if os.path.lexists(final):  # a symbolic link by that name too: never replaced, never followed
        raise CreateRefused(
            f"experiment {name!r} already exists in {experiments_root(home)} "
            f"(`surreal delete {name}` removes it)"
        )
    return final


def create_dir(spec: ExperimentSpec, home: Path, write: Callable[[Path], None]) -> Path:
    """`HOME/experiments/NAME/` with spec.yaml and what `write` puts in it, made under a temporary
    name and renamed into place: a failed create leaves nothing, and of two concurrent creates of
    one name exactly one wins."""
    final = refuse_existing(home, spec.name)
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


def write_scale(exp_dir: Path, agents: int) -> None:
    """The agent count the learner in `exp_dir` follows from now on (scale.SCALE_FILE)."""
    write_json_atomic(exp_dir / SCALE_FILE, {"agents": agents})


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


def mark_deleting(exp_dir: Path | str) -> None:
    """Tell the experiment's components, before they are stopped, that no replacement will start
    (replay.DELETING_FILE: a shard then saves nothing). An empty file, which a full disk still
    takes; nothing is lost if it does not (the save fails and is counted, the folder goes)."""
    with contextlib.suppress(OSError):
        (Path(exp_dir) / DELETING_FILE).touch()


def remove_dir(path: Path) -> None:
    """Remove an experiment's folder. Symbolic links inside are removed, never followed; folders
    the user made read-only are made writable first (they are the user's own). One ExperimentError
    names what could not be removed."""
    for attempt in range(2):
        try:
            shutil.rmtree(path)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if attempt:
                what = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(path) else ""
                raise ExperimentError(f"cannot remove {path}: {exc.strerror or exc}{what}") from None
            _make_writable(path)


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


# A component's or pod's name: one path component (never '..' or a '/'), so logs/NAME.log stays in logs/.
LOG_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*")


def stop_strays(exp_dir: Path | str, grace: float = 5.0) -> None:
    """Stop every surreal process that works on `exp_dir` (its path, or a path inside it, is one
    of its arguments: a supervisor, a component, a containers controller), whatever state.json says
    or whether it can be read. A shell or an editor in the folder is no surreal process."""
    root = os.path.realpath(exp_dir)
    mine = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    strays = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        argv = proc.info["cmdline"] or []
        if proc.info["pid"] in mine or not any(a == "surreal" or a.startswith("surreal.") for a in argv):
            continue
        if any(a == root or a.startswith(root + os.sep) for a in argv):
            strays.append(proc)
    for proc in strays:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(strays, timeout=grace)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=grace)


def tail_log(
    exp_dir: Path | str,
    component: str,
    follow: bool = False,
    lines: int | None = 100,
    *,
    running: Callable[[], bool] | None = None,
    poll_seconds: float = 0.2,
) -> Iterator[str]:
    """Lines (without their newline) of `logs/<component>.log`: the last `lines` (None = all), then
    with `follow` new ones while `running()` says the experiment runs. FileNotFoundError (naming the
    logs that exist) at the call if there is no such log."""
    log_dir = Path(exp_dir) / LOG_DIR
    if not LOG_NAME_RE.fullmatch(component):
        raise FileNotFoundError(f"no log for {component!r}: a component is named like learner or actor-0")
    path = log_dir / f"{component}.log"
    if path.is_symlink() or not path.is_file():
        known = sorted(p.stem for p in log_dir.glob("*.log")) if log_dir.is_dir() else []
        raise FileNotFoundError(f"no log for {component!r} in {log_dir} (logs: {known})")
    return _tail(path, follow, lines, running or (lambda: False), poll_seconds)


def list_experiment_dirs(home: Path | str) -> list[Path]:
    """Experiment directories under `home/experiments` (home = $SURREAL_HOME), sorted by name."""
    root = experiments_root(Path(home))
    if not root.is_dir():
        return []
    # symbolic links too (listed with their problem), but not create's hidden staging folders
    return sorted(p for p in root.iterdir() if (p.is_dir() or p.is_symlink()) and not p.name.startswith("."))


def _tail(
    path: Path, follow: bool, lines: int | None, running: Callable[[], bool], poll_seconds: float
) -> Iterator[str]:
    with open(path, "rb") as f:
        f.seek(_start_of_last_lines(f, lines))
        pending = b""
        drained_after_end = False
        while True:
            chunk = f.read(1 << 16)
            if chunk:
                *complete, pending = (pending + chunk).split(b"\n")
                yield from (line.decode(errors="replace") for line in complete)
                continue
            if not follow or drained_after_end:
                break
            if not running():
                drained_after_end = True  # one more read for what was written before it ended
                continue
            if os.stat(path).st_size < f.tell():  # truncated: start over
                f.seek(0)
            time.sleep(poll_seconds)
        if pending:
            yield pending.decode(errors="replace")


def _start_of_last_lines(f: IO[bytes], lines: int | None) -> int:
    """Byte offset where the last `lines` lines of `f` begin (a trailing newline ends a line)."""
    end = f.seek(0, os.SEEK_END)
    if lines is None or end == 0:
        return 0
    if lines <= 0:
        return end
    f.seek(end - 1)
    pos = end - 1 if f.read(1) == b"\n" else end  # search before the final line's own newline
    found = 0
    while pos > 0:
        size = min(1 << 13, pos)
        f.seek(pos - size)
        block = f.read(size)
        i = len(block)
        while (i := block.rfind(b"\n", 0, i)) >= 0:
            found += 1
            if found == lines:
                return pos - size + i + 1
        pos -= size
    return 0

"""The local backend's processes: start a supervisor (supervisor.py) detached, read its
state.json, tell whether it is alive, and stop it and whatever it left."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from surreal.orchestrator import home
from surreal.orchestrator.files import read_json, write_json_atomic
from surreal.orchestrator.home import LOG_DIR
from surreal.orchestrator.launcher import CorruptFile
from surreal.orchestrator.local.supervisor import PROGRAM_FILE, STATE_FILE, Supervisor, killpg
from surreal.orchestrator.program import Program
from surreal.orchestrator.status import ENDED_STATES, TERMINAL_PHASES, ComponentState, Phase, exit_code

SUPERVISOR_LOG = "supervisor"  # logs/supervisor.log: a detached supervisor's own output
_CREATE_TIME_TOLERANCE = 0.05  # seconds; psutil reports the same value for the same process


def save_program(program: Program, exp_dir: Path | str) -> Path:
    """Write `exp_dir/program.json` (atomically) and return its path."""
    path = Path(exp_dir) / PROGRAM_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, program.to_dict())
    return path


def load_program(exp_dir: Path | str) -> Program:
    return Program.from_dict(json.loads((Path(exp_dir) / PROGRAM_FILE).read_text()))


def run_supervisor(exp_dir: Path | str, *, grace_seconds: float = 5.0) -> int:
    """Body of the hidden `surreal supervise EXP_DIR` command: run program.json to the end."""
    supervisor = Supervisor(load_program(exp_dir), exp_dir, grace_seconds=grace_seconds)
    return exit_code(supervisor.run())


def spawn_detached(
    exp_dir: Path | str, *, command: Sequence[str] | None = None, wait_seconds: float = 10.0
) -> int:
    """Start a supervisor (`command`, default `python -m surreal supervise EXP_DIR`) in a new
    session and return its pid once it has written state.json (up to `wait_seconds`); RuntimeError,
    quoting logs/supervisor.log, if it exits before that."""
    exp_dir = Path(exp_dir).resolve()
    argv = list(command or [sys.executable, "-m", "surreal", "supervise", str(exp_dir)])
    log_path = exp_dir / LOG_DIR / f"{SUPERVISOR_LOG}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            argv,
            cwd=exp_dir,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # survives the terminal and the CLI that started it
        )
    # Reaps it if it ends while we still run (no zombie, no "still running" warning); a daemon
    # thread, so the CLI exits without waiting and the supervisor is handed to init.
    threading.Thread(target=proc.wait, name=f"reap-{proc.pid}", daemon=True).start()
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        state = read_state(exp_dir)
        if state is not None and state.get("supervisor_pid") == proc.pid:
            return proc.pid
        if proc.returncode is not None or not _same_process(proc.pid, None):
            proc.wait()
            tail = "\n".join(home.tail_log(exp_dir, SUPERVISOR_LOG, lines=20))
            raise RuntimeError(f"supervisor exited with code {proc.returncode}:\n{tail}")
        time.sleep(0.05)
    return proc.pid


def read_state(exp_dir: Path | str) -> dict[str, Any] | None:
    """The supervisor's last state.json, or None if there is none yet; CorruptFile naming it when
    it is not what the supervisor writes."""
    path = Path(exp_dir) / STATE_FILE
    state = read_json(path)
    if state is not None and (not isinstance(state.get("phase"), str)
                              or not isinstance(state.get("components", []), list)):  # fmt: skip
        raise CorruptFile(path, "corrupt: no phase or components as the supervisor writes them")
    return state


def is_alive(state: dict[str, Any] | None) -> bool:
    """True if the supervisor that wrote `state` still runs (a recycled pid does not count)."""
    if not state or state.get("supervisor_pid") is None:
        return False
    return _same_process(state["supervisor_pid"], state.get("supervisor_create_time"))


def current_phase(state: dict[str, Any] | None) -> str:
    """The phase to show: Pending without state; Failed if the supervisor vanished mid-run."""
    if state is None:
        return Phase.PENDING.value
    phase = str(state["phase"])
    if phase not in TERMINAL_PHASES and not is_alive(state):
        return Phase.FAILED.value
    return phase


def stop_experiment(exp_dir: Path | str, timeout: float = 20.0) -> None:
    """Before deleting: SIGTERM the supervisor (SIGKILL after `timeout`), then the process groups
    of components still alive (a supervisor killed without its pdeathsig, a non-Linux host); mark
    it Stopped. Its components are told first that nothing they could save will be used."""
    home.mark_deleting(exp_dir)
    state = read_state(exp_dir)
    if state is None:
        return
    if is_alive(state):
        supervisor = psutil.Process(state["supervisor_pid"])
        supervisor.send_signal(signal.SIGTERM)
        _, alive = psutil.wait_procs([supervisor], timeout=timeout)
        for proc in alive:
            proc.kill()
        psutil.wait_procs(alive, timeout=5.0)
    state = read_state(exp_dir) or state
    leftovers = [
        c["pid"]
        for c in state.get("components", [])
        if c.get("pid") and _same_process(c["pid"], c.get("pid_create_time"))
    ]
    _kill_groups(leftovers, grace=min(timeout, 5.0))
    if str(state.get("phase")) not in TERMINAL_PHASES:
        _mark_stopped(exp_dir, state)


def _same_process(pid: int, create_time: float | None) -> bool:
    """pid runs, is not a zombie, and (if known) was created when recorded (not recycled)."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return create_time is None or abs(proc.create_time() - create_time) < _CREATE_TIME_TOLERANCE
    except psutil.Error:
        return False


def _kill_groups(pgids: list[int], grace: float) -> None:
    """SIGTERM each process group, then SIGKILL what is left after `grace` seconds."""
    if not pgids:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pgid in pgids:
            killpg(pgid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_group_alive(g) for g in pgids):
            time.sleep(0.05)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return any(
        p.info["status"] != psutil.STATUS_ZOMBIE
        for p in psutil.process_iter(["pid", "status"])
        if _pgid(p.info["pid"]) == pgid
    )


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _mark_stopped(exp_dir: Path | str, state: dict[str, Any]) -> None:
    """Record that the experiment was stopped when its supervisor could not do it itself; on a
    full disk it cannot, and the folder is removed next all the same."""
    state = dict(state, phase=Phase.STOPPED.value, ended_at=state.get("ended_at") or time.time())
    state["components"] = [
        c if c.get("state") in ENDED_STATES else dict(c, state=ComponentState.STOPPED.value)
        for c in state.get("components", [])
    ]
    with contextlib.suppress(OSError):
        write_json_atomic(Path(exp_dir) / STATE_FILE, state)

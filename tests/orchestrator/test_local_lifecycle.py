"""Lifecycle helpers the CLI calls: detached supervisor, stop, state, logs, listing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from surreal.orchestrator.home import list_experiment_dirs, tail_log
from surreal.orchestrator.local.launcher import LocalLauncher
from surreal.orchestrator.local.processes import (
    current_phase,
    is_alive,
    load_program,
    read_state,
    save_program,
    spawn_detached,
    stop_experiment,
)
from surreal.orchestrator.program import Component, Program

SUPERVISE = [
    sys.executable,
    "-c",
    "import sys; from surreal.orchestrator.local.processes import run_supervisor; "
    "sys.exit(run_supervisor(sys.argv[1], grace_seconds=2.0))",
]
TICKER = "import time\nwhile True:\n    print('tick')\n    time.sleep(0.05)"


def wait_for(pred: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_detached_supervisor_is_stopped_and_followed_logs_end(tmp_path: Path) -> None:
    exp_dir = tmp_path / "experiments" / "exp1"
    sleep = (sys.executable, "-c", "import time; time.sleep(600)")
    program = Program(
        "exp1",
        (
            Component("learner", "learner", sleep),
            Component("actor-0", "actor", (sys.executable, "-c", TICKER)),
        ),
    )
    save_program(program, exp_dir)
    assert load_program(exp_dir) == program
    pid = spawn_detached(exp_dir, command=[*SUPERVISE, str(exp_dir)])
    try:
        state = read_state(exp_dir)
        assert state is not None and state["supervisor_pid"] == pid and is_alive(state)
        state = wait_for(lambda: (s := read_state(exp_dir)) and s["phase"] == "Running" and s, what="Running")
        pids = [c["pid"] for c in state["components"]]
        assert os.getsid(pid) == pid  # its own session: survives the terminal that started it

        seen: list[str] = []
        follower = threading.Thread(
            target=lambda: seen.extend(
                LocalLauncher(tmp_path).logs_of(exp_dir, "actor-0", follow=True, lines=0, previous=False)
            ),
            daemon=True,
        )
        follower.start()
        wait_for(lambda: any(line.startswith("tick") for line in seen), what="followed lines")
        stop_experiment(exp_dir, timeout=10)
        follower.join(5)
        assert not follower.is_alive(), "logs --follow did not end with the experiment"
    finally:
        stop_experiment(exp_dir, timeout=10)

    state = read_state(exp_dir)
    assert state is not None and state["phase"] == "Stopped" and not is_alive(state)
    assert current_phase(state) == "Stopped"
    assert all(gone(p) for p in [pid, *pids])
    assert any("stopping (SIGTERM)" in line for line in seen)
    assert list(tail_log(exp_dir, "actor-0", lines=1))[0].endswith("stopping (SIGTERM)")


def test_spawn_detached_reports_a_supervisor_that_dies(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "print('no program.json here'); raise SystemExit(3)"]
    with pytest.raises(RuntimeError, match="no program.json here"):
        spawn_detached(tmp_path, command=command)


def test_stop_experiment_kills_components_of_a_dead_supervisor(tmp_path: Path) -> None:
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        state = {
            "experiment": "exp1",
            "phase": "Running",
            "supervisor_pid": dead.pid,
            "supervisor_create_time": 0.0,
            "started_at": time.time(),
            "ended_at": None,
            "components": [
                {
                    "name": "actor-0",
                    "role": "actor",
                    "state": "Running",
                    "restarts": 0,
                    "pid": orphan.pid,
                    "pid_create_time": psutil.Process(orphan.pid).create_time(),
                    "exit_code": None,
                }
            ],
        }
        (tmp_path / "state.json").write_text(json.dumps(state))
        assert not is_alive(state) and current_phase(state) == "Failed"
        stop_experiment(tmp_path, timeout=5)
        assert orphan.wait(timeout=5) is not None
    finally:
        orphan.kill()
        orphan.wait()
    after = read_state(tmp_path)
    assert after is not None and after["phase"] == "Stopped" and after["ended_at"]
    assert after["components"][0]["state"] == "Stopped"


def test_is_alive_does_not_trust_a_recycled_pid() -> None:
    me = psutil.Process()
    assert is_alive({"supervisor_pid": me.pid, "supervisor_create_time": me.create_time()})
    assert not is_alive({"supervisor_pid": me.pid, "supervisor_create_time": me.create_time() - 60})
    assert not is_alive(None)
    assert current_phase(None) == "Pending"


def test_tail_log_last_lines(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "learner.log").write_text("".join(f"line {i}\n" for i in range(3000)))
    (logs / "actor-0.log").write_text("a\nb\nno newline")
    assert list(tail_log(tmp_path, "learner", lines=2)) == ["line 2998", "line 2999"]
    many = list(tail_log(tmp_path, "learner", lines=2500))  # spans several 8 KiB blocks
    assert many == [f"line {i}" for i in range(500, 3000)]
    assert len(list(tail_log(tmp_path, "learner", lines=None))) == 3000
    assert list(tail_log(tmp_path, "learner", lines=0)) == []
    assert list(tail_log(tmp_path, "actor-0", lines=2)) == ["b", "no newline"]
    # No live supervisor: following drains the file and ends instead of hanging.
    assert list(tail_log(tmp_path, "actor-0", follow=True, lines=5)) == ["a", "b", "no newline"]
    with pytest.raises(FileNotFoundError, match="actor-0"):
        tail_log(tmp_path, "evaluator")


def test_list_experiment_dirs(tmp_path: Path) -> None:
    assert list_experiment_dirs(tmp_path) == []
    for name in ("b", "a", ".hidden"):
        (tmp_path / "experiments" / name).mkdir(parents=True)
    (tmp_path / "experiments" / "stray-file").touch()
    assert list_experiment_dirs(tmp_path) == [tmp_path / "experiments" / n for n in ("a", "b")]

"""Driving the installed `surreal` command as a user would, for the integration tests.

Every run gets its own SURREAL_HOME; every wait has an explicit timeout; nothing asserts on wall
time or throughput. The `cli` fixture (conftest.py) kills whatever a failed test left running.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil

from surreal.orchestrator.local.processes import is_alive

SURREAL = shutil.which("surreal", path=str(Path(sys.executable).parent))
CLI_TIMEOUT = 60.0  # seconds any one short command (status, list, logs, delete) may take
# Seconds a small CartPole run may take to end on a busy 2-core machine: a deadline (passing runs
# take 20-60 s; 180 s ran out once while three test sessions shared the 2 cores).
RUN_TIMEOUT = 300.0
TERMINAL = ("Succeeded", "Failed", "Stopped")


class Cli:
    """Runs the installed `surreal` with one SURREAL_HOME and reads what it leaves there."""

    def __init__(self, home: Path) -> None:
        assert SURREAL is not None, f"no `surreal` next to {sys.executable}"
        self.home = home
        self.env = {**os.environ, "SURREAL_HOME": str(home)}

    def argv(self, *args: str) -> list[str]:
        return [str(SURREAL), *args]

    def run(
        self, *args: str, timeout: float = CLI_TIMEOUT, ok: bool = True
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(self.argv(*args), env=self.env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)  # fmt: skip
        if ok:
            detail = f"surreal {' '.join(args)}: {proc.returncode}\n{proc.stderr}"
            assert proc.returncode == 0, detail
        return proc

    def status(self, name: str) -> dict[str, Any]:
        return json.loads(self.run("status", name, "-o", "json").stdout)

    def exp_dir(self, name: str) -> Path:
        return self.home / "experiments" / name

    def state(self, name: str) -> dict[str, Any]:
        """The supervisor's state.json (pids are not in `status`, by design)."""
        return json.loads((self.exp_dir(name) / "state.json").read_text())

    def component(self, name: str, component: str) -> dict[str, Any]:
        """One component's entry in the supervisor's state.json."""
        return next(c for c in self.state(name)["components"] if c["name"] == component)

    def leftovers(self) -> list[psutil.Process]:
        """Live processes whose command line mentions this SURREAL_HOME (supervisor, components)."""
        return processes_mentioning(str(self.home.resolve()), str(self.home))


def processes_mentioning(*needles: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if proc.info["status"] != psutil.STATUS_ZOMBIE and any(n in cmdline for n in needles):
            found.append(proc)
    return found


def wait_for(pred: Callable[[], Any], timeout: float, what: str, poll: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def running(cli: Cli, name: str, min_updates: int = 0) -> dict[str, Any] | None:
    """The learner's status once the run is Running and has counted env steps and `min_updates`
    updates, read from the files the run writes (the supervisor's state.json, the learner's
    status.json), not through `surreal status`: a test that acts on the run the moment this
    returns acts within milliseconds of what it read, not seconds of CLI start-up later, while a
    small run may end within seconds."""
    try:
        state = cli.state(name)
        learner = json.loads((cli.exp_dir(name) / "status.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None  # not written yet (both files are replaced atomically)
    assert state["phase"] in ("Pending", "Running") and not learner.get("done"), (
        f"run ended early: {state['phase']}, {learner}"
    )  # fmt: skip
    progress = (learner["env_steps"] or 0) > 0 and (learner["updates"] or 0) >= min_updates
    return learner if state["phase"] == "Running" and progress else None


@contextlib.contextmanager
def frozen(cli: Cli, name: str, role: str = "actor") -> Iterator[list[int]]:
    """Every running component of `role` stopped (SIGSTOP) for the block, then continued: with
    its actors frozen a run takes no env step, so it cannot end while the test looks at it or
    injects faults, however fast the machine. Yields their pids."""
    pids = [c["pid"] for c in cli.state(name)["components"] if c["role"] == role and c["state"] == "Running"]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield pids
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def ended(cli: Cli, name: str, seen: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """`surreal status` once the run is over, else None. Until then it reads the run's files, not
    the CLI (a `surreal status` costs a second of a core; a test polling it twice a second while
    its run finishes took half the machine): the supervisor's state.json says the phase, and
    while its supervisor lives nothing else ends the run. Every read while running is appended
    to `seen`: the learner's status.json with the supervisor's components."""
    try:
        state = cli.state(name)
    except (FileNotFoundError, json.JSONDecodeError):
        state = None
    if state is not None and state["phase"] not in TERMINAL and is_alive(state):
        if seen is not None:
            with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
                learner = json.loads((cli.exp_dir(name) / "status.json").read_text())
                seen.append({**learner, "components": state["components"]})
        return None
    st = cli.status(name)
    return st if st["phase"] in TERMINAL else None


def status_after(cli: Cli, name: str, since: float, timeout: float = 30.0) -> dict[str, Any]:
    """The learner's status.json once it was written after `since` (a time.time(); half a second
    after, as file times are coarse): with the actors frozen at `since`, it shows where the run is
    held (the learner writes it about once a second, also while it waits for experience)."""
    path = cli.exp_dir(name) / "status.json"
    wait_for(lambda: path.stat().st_mtime > since + 0.5, timeout, "a status written after the freeze")
    return json.loads(path.read_text())

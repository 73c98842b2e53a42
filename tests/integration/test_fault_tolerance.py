"""End-to-end fault tolerance of the installed `surreal` command: SIGKILLed components of a
detached run are restarted by its supervisor and the experiment still succeeds.

Every test drives `surreal` as a subprocess with its own SURREAL_HOME, bounds its runs by env steps
and every wait by an explicit timeout, and never asserts on wall time or throughput.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

pytestmark = pytest.mark.slow

SURREAL = shutil.which("surreal", path=str(Path(sys.executable).parent))
CLI_TIMEOUT = 60.0  # seconds any one short command (status, logs, delete) may take
RUN_TIMEOUT = 180.0  # seconds a small CartPole run may take to end on a busy 2-core machine
STEPS = 30_000  # env steps of each run: long enough to kill something in the middle
QUICK = ("--algo", "ppo", "--env", "CartPole-v1", "--agents", "2", "--seed", "1",
         "--steps", str(STEPS), "--set", "eval_episodes=2")  # fmt: skip


class Cli:
    """Runs the installed `surreal` with one SURREAL_HOME and reads what it leaves there."""

    def __init__(self, home: Path) -> None:
        assert SURREAL is not None, f"no `surreal` next to {sys.executable}"
        self.home = home
        self.env = {**os.environ, "SURREAL_HOME": str(home)}

    def run(self, *args: str, timeout: float = CLI_TIMEOUT) -> str:
        proc = subprocess.run([str(SURREAL), *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)  # fmt: skip
        assert proc.returncode == 0, f"surreal {' '.join(args)}: {proc.returncode}\n{proc.stderr}"
        return proc.stdout

    def status(self, name: str) -> dict[str, Any]:
        return json.loads(self.run("status", name, "-o", "json"))

    def exp_dir(self, name: str) -> Path:
        return self.home / "experiments" / name

    def component(self, name: str, component: str) -> dict[str, Any]:
        """One component's entry in the supervisor's state.json (pids are not in `status`)."""
        state = json.loads((self.exp_dir(name) / "state.json").read_text())
        return next(c for c in state["components"] if c["name"] == component)


def wait_for(pred: Callable[[], Any], timeout: float, what: str, poll: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def dead(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def identity(path: Path) -> tuple[int, int]:
    """Changes whenever the file is atomically replaced (new inode) or rewritten."""
    st = os.stat(path)
    return st.st_ino, st.st_mtime_ns


def restarts(st: dict[str, Any]) -> dict[str, int]:
    return {c["name"]: c["restarts"] for c in st["components"]}


def running(cli: Cli, name: str, min_updates: int = 0) -> dict[str, Any] | None:
    """The status once the run has counted env steps and `min_updates` updates, else None."""
    st = cli.status(name)
    assert st["phase"] in ("Pending", "Running"), f"run ended early: {st}"
    progress = (st["env_steps"] or 0) > 0 and (st["updates"] or 0) >= min_updates
    return st if st["phase"] == "Running" and progress else None


def ended(cli: Cli, name: str, seen: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
    st = cli.status(name)
    if seen is not None:
        seen.append(st)
    return st if st["phase"] in ("Succeeded", "Failed", "Stopped") else None


def restarted(cli: Cli, name: str, component: str, old_pid: int) -> dict[str, Any] | None:
    entry = cli.component(name, component)
    ok = entry["restarts"] == 1 and entry["state"] == "Running" and entry["pid"] != old_pid
    return entry if ok else None


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    c = Cli(tmp_path / "home")
    yield c
    # Whatever a failed test left running is ours (its command line names our SURREAL_HOME).
    for proc in psutil.process_iter(["cmdline"]):
        if str(c.home) in " ".join(proc.info["cmdline"] or []):
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()


def test_killed_actor_is_restarted_and_the_run_succeeds(cli: Cli) -> None:
    cli.run("create", "ft-actor", *QUICK, "--detach", timeout=30.0)
    wait_for(lambda: running(cli, "ft-actor"), 60.0, "phase Running with env steps")
    victim = cli.component("ft-actor", "actor-0")

    os.kill(victim["pid"], signal.SIGKILL)

    wait_for(lambda: restarted(cli, "ft-actor", "actor-0", victim["pid"]), 60.0, "a new actor-0")
    st = cli.status("ft-actor")
    assert restarts(st)["actor-0"] == 1, st["components"]
    final = wait_for(lambda: ended(cli, "ft-actor"), RUN_TIMEOUT, "the run to end", poll=0.5)
    assert final["phase"] == "Succeeded", final
    assert final["env_steps"] >= STEPS
    assert restarts(final) == {**{n: 0 for n in restarts(final)}, "actor-0": 1}, final["components"]
    cli.run("delete", "ft-actor")


def test_killed_learner_resumes_from_its_checkpoint(cli: Cli) -> None:
    every = 5
    cli.run("create", "ft-learner", *QUICK, "--set", f"checkpoint_every={every}", "--detach",
            timeout=30.0)  # fmt: skip
    checkpoints = cli.exp_dir("ft-learner") / "checkpoints"
    wait_for(
        lambda: running(cli, "ft-learner", min_updates=2 * every)
        and checkpoints.is_dir() and any(checkpoints.iterdir()),
        90.0, f"{2 * every} updates and a checkpoint",
    )  # fmt: skip
    before = cli.status("ft-learner")  # just before the kill
    # status.json is written after an update (and its checkpoint) completed, so the learner's
    # latest checkpoint holds at least this many updates.
    checkpointed = before["updates"] // every * every
    assert checkpointed > 0 and before["policy_version"] >= checkpointed
    victim = cli.component("ft-learner", "learner")
    status_file = cli.exp_dir("ft-learner") / "status.json"

    os.kill(victim["pid"], signal.SIGKILL)
    wait_for(lambda: dead(victim["pid"]), 10.0, "the learner to die", poll=0.01)
    # From here only the restarted learner writes the status file: its first write shows what it
    # restored (it writes status before it takes any experience).
    old = identity(status_file)
    first = json.loads(wait_for(
        lambda: identity(status_file) != old and status_file.read_text(),
        90.0, "the restarted learner's first status", poll=0.01,
    ))  # fmt: skip
    assert first["updates"] >= checkpointed, (checkpointed, first)
    assert first["policy_version"] >= checkpointed, (checkpointed, first)
    assert first["env_steps"] > 0, first

    wait_for(lambda: restarted(cli, "ft-learner", "learner", victim["pid"]), 60.0, "a new learner")
    seen: list[dict[str, Any]] = []
    final = wait_for(lambda: ended(cli, "ft-learner", seen), RUN_TIMEOUT, "the end", poll=0.5)
    assert final["phase"] == "Succeeded", final
    assert final["env_steps"] >= STEPS
    assert restarts(final)["learner"] == 1, final["components"]
    for st in seen:  # never back to zero, never below the checkpoint
        assert restarts(st)["learner"] == 1, st["components"]
        assert st["updates"] >= checkpointed and st["policy_version"] >= checkpointed, st
        assert st["env_steps"] >= first["env_steps"], (first, st)

    learner_log = cli.run("logs", "ft-learner", "learner", "--lines", "100000")
    cli.run("delete", "ft-learner")
    assert re.search(r"resum|restor", learner_log, re.IGNORECASE), (
        f"the restarted learner's log does not say it resumed from its checkpoint:\n{learner_log}"
    )

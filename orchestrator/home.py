"""Experiments that live on this machine, in `$SURREAL_HOME/experiments/NAME/`: the local and the
containers backends share that home. Each experiment's spec.yaml records its backend, so a command
that names an experiment is handled by the launcher that made it, whichever one it was asked of.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from abc import abstractmethod
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from surreal.orchestrator import experiments as exps
from surreal.orchestrator import local
from surreal.orchestrator.launcher import (
    Forward,
    Launcher,
    LauncherError,
    Placement,
    UsageError,
    check_agents,
    check_port_free,
)

T = TypeVar("T")


class HomeLauncher(Launcher):
    """What local and containers experiments share: the home, listing, dispatch by backend, and
    TensorBoard and plots read from the event files on this machine."""

    def __init__(self, home: Path) -> None:
        self.home = home

    # --- dispatch --------------------------------------------------------------------------

    def owner(self, exp_dir: Path) -> HomeLauncher:
        """The launcher of the backend that made the experiment in `exp_dir`."""
        try:
            backend = str(exps.read_spec(exp_dir).get("backend", "local"))
        except LauncherError:  # no or a corrupt spec.yaml: still listed and deletable
            backend = "containers" if (exp_dir / "containers.json").exists() else "local"
        if backend == self.backend:
            return self
        if backend == "containers":
            from surreal.orchestrator.containers_launcher import ContainersLauncher

            return ContainersLauncher(self.home)
        if backend == "local":
            from surreal.orchestrator.local_launcher import LocalLauncher

            return LocalLauncher(self.home)
        raise LauncherError(
            f"experiment {exp_dir.name!r} records backend {backend!r}, not one of this home's"
        )

    def _dir(self, name: str) -> tuple[Path, HomeLauncher]:
        exp_dir = exps.existing_dir(self.home, name)
        return exp_dir, self.owner(exp_dir)

    def check_placement(self, placement: Placement) -> None:
        if placement.given:
            raise UsageError("--pools and --provider place pods on a cluster: they need --backend kube")

    def list_experiments(self) -> list[dict[str, Any]]:
        rows = []
        for exp_dir in local.list_experiment_dirs(self.home):
            try:
                exps.existing_dir(self.home, exp_dir.name)
                rows.append(self.owner(exp_dir).status_of(exp_dir))
            except LauncherError as exc:  # one bad experiment hides no other
                unknown = dict.fromkeys(("algo", "env", "agents", "env_steps", "eval_return"))
                rows.append({**unknown, "name": exp_dir.name, "backend": "?", "phase": "Unknown",
                             "problem": str(exc)})  # fmt: skip
        return rows

    def status(self, name: str) -> dict[str, Any]:
        exp_dir, owner = self._dir(name)
        return owner.status_of(exp_dir)

    def logs(
        self,
        name: str,
        component: str,
        *,
        follow: bool = False,
        lines: int | None = 100,
        previous: bool = False,
    ) -> Iterator[str]:
        exp_dir, owner = self._dir(name)
        return owner.logs_of(exp_dir, component, follow=follow, lines=lines, previous=previous)

    def scale(self, name: str, agents: int) -> str:
        check_agents(agents)
        exp_dir, owner = self._dir(name)
        return owner.scale_of(exp_dir, agents)

    def delete(self, name: str) -> str:
        exp_dir, owner = self._dir(name)
        owner.delete_of(exp_dir)
        return f"experiment {name!r} deleted"

    def tensorboard(self, name: str, port: int) -> Forward:
        exp_dir, owner = self._dir(name)
        check_port_free(port)
        return LocalTensorBoard(owner.tb_dir(exp_dir), port)

    def events(self, name: str) -> Any:
        from surreal.orchestrator import plot

        exp_dir, owner = self._dir(name)
        return plot.read_events(owner.tb_dir(exp_dir), name)

    # --- per backend ------------------------------------------------------------------------

    @abstractmethod
    def status_of(self, exp_dir: Path) -> dict[str, Any]: ...

    @abstractmethod
    def logs_of(
        self, exp_dir: Path, component: str, *, follow: bool, lines: int | None, previous: bool
    ) -> Iterator[str]: ...

    @abstractmethod
    def scale_of(self, exp_dir: Path, agents: int) -> str: ...

    @abstractmethod
    def delete_of(self, exp_dir: Path) -> None: ...

    @abstractmethod
    def tb_dir(self, exp_dir: Path) -> Path: ...


def tail_log(exp_dir: Path, name: str, *, follow: bool = False, lines: int | None = 100) -> Iterator[str]:
    """Lines of `exp_dir/logs/NAME.log`; a missing log is one line naming the ones there are."""
    try:
        return local.tail_log(exp_dir, name, follow=follow, lines=lines)
    except FileNotFoundError as exc:
        raise LauncherError(str(exc)) from None


class LocalTensorBoard:
    """`tensorboard --logdir DIR` on 127.0.0.1:PORT, as a child process stopped by `close`."""

    def __init__(self, tb_dir: Path, port: int) -> None:
        self.address = f"127.0.0.1:{port}"
        argv = [sys.executable, "-m", "tensorboard.main", "--logdir", str(tb_dir), "--host", "127.0.0.1",
                "--port", str(port)]  # fmt: skip
        self._proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONWARNINGS": "ignore"}
        )

    def wait(self) -> None:
        self._proc.wait()

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


def wait_until(what: str, predicate: Callable[[], T], timeout: float, poll: float = 0.2) -> T:
    """Wait for a condition and return its (truthy) value, or raise LauncherError naming it."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise LauncherError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll)
    return value

"""The launchers of experiments that live on this machine (local and containers): what they share
on top of the experiment home (home.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from surreal.orchestrator import home
from surreal.orchestrator.launcher import Launched, LauncherError, Placement, UsageError, Watcher

if TYPE_CHECKING:
    from surreal.spec import ExperimentSpec


class HomeLauncher(ABC):
    """A backend whose experiments live in the home (local, containers): what it does with one
    experiment's folder. backends.HomeDispatch takes each command by name to the backend that
    made the experiment."""

    backend: str

    def __init__(self, home: Path) -> None:
        self.home = home

    def check_placement(self, placement: Placement) -> None:
        if placement.given:
            raise UsageError("--pools and --provider place pods on a cluster: they need --backend kube")

    @abstractmethod
    def dry_run(self, spec: ExperimentSpec, output: str, placement: Placement) -> str: ...

    @abstractmethod
    def create(
        self, spec: ExperimentSpec, *, detach: bool, placement: Placement, watch: Watcher | None = None
    ) -> Launched: ...

    @abstractmethod
    def status_of(self, exp_dir: Path) -> dict[str, Any]: ...

    @abstractmethod
    def logs_of(
        self, exp_dir: Path, component: str, *, follow: bool, lines: int | None, previous: bool
    ) -> Iterator[str]: ...

    @abstractmethod
    def scale_of(self, exp_dir: Path, agents: int, learner_pods: int | None) -> str: ...

    @abstractmethod
    def delete_of(self, exp_dir: Path) -> None: ...

    @abstractmethod
    def tb_dir(self, exp_dir: Path) -> Path: ...


def read_log(
    exp_dir: Path,
    name: str,
    *,
    follow: bool = False,
    lines: int | None = 100,
    running: Callable[[], bool] | None = None,
) -> Iterator[str]:
    """Lines of `exp_dir/logs/NAME.log` (followed while `running()`); a missing log is one line
    naming the ones there are."""
    try:
        return home.tail_log(exp_dir, name, follow=follow, lines=lines, running=running)
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

"""The launchers of experiments that live on this machine (local and containers): what they share
on top of the experiment home (home.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from abc import abstractmethod
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from surreal.orchestrator import home, plot
from surreal.orchestrator.launcher import (
    Forward,
    Launcher,
    LauncherError,
    Placement,
    UsageError,
    check_agents,
    check_port_free,
)


class HomeLauncher(Launcher):
    """What the local and containers launchers share for the experiments of their backend in the
    home: each command on one experiment through the backend's `*_of` method, TensorBoard and
    plots read from the event files on this machine. Which backend made an experiment is the
    dispatcher's question (backends.HomeDispatch), not this class's."""

    def __init__(self, home: Path) -> None:
        self.home = home

    def check_placement(self, placement: Placement) -> None:
        if placement.given:
            raise UsageError("--pools and --provider place pods on a cluster: they need --backend kube")

    def list_experiments(self) -> list[dict[str, Any]]:
        return [self.status_of(d) for d in home.list_experiment_dirs(self.home)]

    def status(self, name: str) -> dict[str, Any]:
        return self.status_of(home.existing_dir(self.home, name))

    def logs(
        self,
        name: str,
        component: str,
        *,
        follow: bool = False,
        lines: int | None = 100,
        previous: bool = False,
    ) -> Iterator[str]:
        exp_dir = home.existing_dir(self.home, name)
        return self.logs_of(exp_dir, component, follow=follow, lines=lines, previous=previous)

    def scale(self, name: str, agents: int, learner_pods: int | None = None) -> str:
        check_agents(agents)
        return self.scale_of(home.existing_dir(self.home, name), agents, learner_pods)

    def delete(self, name: str) -> str:
        self.delete_of(home.existing_dir(self.home, name))
        return f"experiment {name!r} deleted"

    def tensorboard(self, name: str, port: int) -> Forward:
        exp_dir = home.existing_dir(self.home, name)
        check_port_free(port)
        return LocalTensorBoard(self.tb_dir(exp_dir), port)

    def events(self, name: str) -> Any:
        return plot.read_events(self.tb_dir(home.existing_dir(self.home, name)), name)

    # --- per backend ------------------------------------------------------------------------

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

"""One way to launch, three places to run: the `Launcher` interface and its errors.

The CLI asks `backends.open_launcher` for the launcher of `--backend` once, and from then on only
calls this interface: create, list, status, logs, scale, delete, tensorboard (and `events` for
`surreal plot`). The implementations are the backends' subpackages: `local` (supervised processes
on this machine, the default), `containers` (the rendered Kubernetes objects as real podman or
Docker containers) and `kube` (the objects applied through the official client). Every failure is
a `LauncherError` whose text is the one line to show.
"""

from __future__ import annotations

import importlib
import logging
import os
import socket
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from surreal.orchestrator.program import ENV_JOBS_WATCH
from surreal.orchestrator.status import exit_code
from surreal.spec import SpecError
from surreal.spec import check_agents as spec_check_agents

if TYPE_CHECKING:
    from surreal.spec import ExperimentSpec

T = TypeVar("T")


class LauncherError(RuntimeError):
    """An operation a launcher cannot do; str(error) is the one line to show, and nothing the
    operation started is left behind."""

    exit_code = 1


class UsageError(LauncherError):
    """A request that cannot be right on this backend, whatever the machine (exit code 2, as for
    other bad command lines)."""

    exit_code = 2


class CorruptFile(LauncherError):
    """A file of an experiment's that is missing, unreadable or not what surreal wrote; the line
    names the file and the problem (`delete` still removes such an experiment)."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class Forward(Protocol):
    """A server reachable on this machine until closed (TensorBoard, locally or forwarded)."""

    @property
    def address(self) -> str: ...  # "127.0.0.1:PORT"
    def wait(self) -> None: ...  # until it ends or Ctrl-C
    def close(self) -> None: ...


@dataclass(frozen=True)
class Placement:
    """Where pods go on a cluster: a node-pools file or a provider's default pools (kube only)."""

    pools_file: Path | None = None
    provider: str | None = None

    @property
    def given(self) -> bool:
        return self.pools_file is not None or self.provider is not None


@dataclass(frozen=True)
class Launched:
    """What `create` did: `phase` is the final phase when it waited for the end (None: the
    experiment runs on), `message` the line to show."""

    name: str
    message: str
    phase: str | None = None

    @property
    def exit_code(self) -> int:
        """The status contract's exit code for the phase it waited for (0 while it runs on)."""
        return exit_code(self.phase)


class Watcher(Protocol):
    """What a foreground `create` tells the person while it waits for the end."""

    def started(self, line: str) -> None: ...  # what runs where, once it runs
    def tick(self, metrics: dict[str, Any]) -> None: ...  # the learner's metrics, about every 0.5 s


class Launcher(ABC):
    """Experiments on one backend. Implementations raise `LauncherError` (or a subclass) only."""

    backend: str

    @abstractmethod
    def dry_run(self, spec: ExperimentSpec, output: str, placement: Placement) -> str:
        """What `create --dry-run -o OUTPUT` prints: what would run, nothing created."""

    @abstractmethod
    def create(
        self, spec: ExperimentSpec, *, detach: bool, placement: Placement, watch: Watcher | None = None
    ) -> Launched:
        """Create and start the experiment; without `detach`, wait for its end where the backend
        runs it on this machine. On any failure (Ctrl-C included) nothing is left running."""

    @abstractmethod
    def list_experiments(self) -> list[dict[str, Any]]:
        """One row per experiment: name, algo, env, agents, phase, env_steps, eval_return."""

    @abstractmethod
    def status(self, name: str) -> dict[str, Any]:
        """The status contract's object (docs/getting-started.md), running or ended."""

    @abstractmethod
    def logs(
        self,
        name: str,
        component: str,
        *,
        follow: bool = False,
        lines: int | None = 100,
        previous: bool = False,
    ) -> Iterator[str]:
        """Lines of one component's log (also of one that crashed)."""

    @abstractmethod
    def scale(self, name: str, agents: int, learner_pods: int | None = None) -> str:
        """Run `agents` logical agents from now on, without restarting the learner (an experiment
        admitted as one unit, `--queue`: suspended, made again at the new size, `learner_pods` too
        where given, and resumed: orchestrator/resize.py); returns the line to show."""

    @abstractmethod
    def delete(self, name: str) -> str:
        """Stop everything of the experiment and remove it; returns the line to show."""

    @abstractmethod
    def tensorboard(self, name: str, port: int) -> Forward:
        """The experiment's TensorBoard on 127.0.0.1:PORT until closed."""

    @abstractmethod
    def events(self, name: str) -> Any:
        """The experiment's TensorBoard scalars as `orchestrator.plot` reads them (a `Run`)."""


def check_agents(agents: int) -> None:
    """The agent counts `scale` accepts: the spec's bound at create (and the learner's for
    scale.json)."""
    try:
        spec_check_agents(agents, "--agents")
    except SpecError as exc:
        raise UsageError(str(exc)) from None


def check_port_free(port: int, host: str = "127.0.0.1") -> None:
    """Refuse a port that something on this machine already listens on, before starting anything."""
    if not 0 < port < 65536:
        raise LauncherError(f"port {port} is out of range (1-65535)")
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            raise LauncherError(f"port {port} on {host} is taken (pick another with --port)") from None


def start_jobs_watch(role: str, on_end: Callable[[Any], None]) -> Any:
    """The watch of the experiment's Jobs that the backend running this component gives it, started:
    SURREAL_JOBS_WATCH is "BACKEND:WHERE", and the backend's module `watch` starts it with
    `start(role, WHERE, on_end)` (its object has `stop()`). None where the backend gives none (the
    local supervisor and the containers controller end their components themselves), or where it
    cannot start, said in the log: the component then runs on without it."""
    value = os.environ.get(ENV_JOBS_WATCH)
    if not value:
        return None
    backend, _, where = value.partition(":")
    try:
        return importlib.import_module(f"surreal.orchestrator.{backend}.watch").start(role, where, on_end)
    except (ImportError, ValueError) as exc:
        logging.getLogger(__name__).warning("no watch of the experiment's Jobs (%s=%r): %s",
                                            ENV_JOBS_WATCH, value, exc)  # fmt: skip
        return None


def wait_until(what: str, predicate: Callable[[], T], timeout: float, poll: float = 0.2) -> T:
    """Wait for a condition and return its (truthy) value, or raise LauncherError naming it."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise LauncherError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll)
    return value

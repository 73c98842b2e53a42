"""One way to launch, three places to run: the `Launcher` interface and the choice of one.

The CLI builds a spec, asks `open_launcher` for the launcher of `--backend` once, and from then on
only calls the interface: create, list, status, logs, scale, delete, tensorboard (and `events`
for `surreal plot`). Three implementations:

- local (`local_launcher.LocalLauncher`, the default): supervised subprocesses on this machine;
- containers (`containers_launcher.ContainersLauncher`): the rendered Kubernetes objects run as
  real containers on podman or Docker, no cluster needed;
- kube (`kube_backend.KubeBackend`): the objects applied through the official client.

Local and containers experiments both live in `$SURREAL_HOME/experiments/NAME/` and record their
backend there, so a command that names an experiment reaches the launcher that made it whichever
`--backend` it was given (`HomeLauncher.owner`). Every failure is a `LauncherError` whose text is
the one line to show.
"""

from __future__ import annotations

import json
import socket
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from surreal.spec import BACKENDS, SpecError
from surreal.spec import check_agents as spec_check_agents

if TYPE_CHECKING:
    from surreal.spec import ExperimentSpec


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


def read_json(path: Path, *, required: bool = False) -> dict[str, Any] | None:
    """The JSON object in `path`: None when it does not exist (unless `required`), CorruptFile
    when it cannot be read, is not UTF-8 JSON, or holds something other than an object."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        if required:
            raise CorruptFile(path, "missing") from None
        return None
    except OSError as exc:
        raise CorruptFile(path, f"cannot be read ({exc.strerror or exc})") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise CorruptFile(path, "corrupt: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        at = f"{exc.msg} at line {exc.lineno}, column {exc.colno}"
        what = "empty" if not raw.strip() else f"not JSON ({at})"
        raise CorruptFile(path, f"corrupt: {what}") from None
    except RecursionError:
        raise CorruptFile(path, "corrupt: nested too deeply") from None
    if not isinstance(data, dict):
        raise CorruptFile(path, f"corrupt: a JSON {type(data).__name__}, not an object")
    return data


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
        """0 while running or Succeeded, 130 for Stopped (as after Ctrl-C), 1 otherwise."""
        return {None: 0, "Succeeded": 0, "Stopped": 130}.get(self.phase, 1)


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
    def scale(self, name: str, agents: int) -> str:
        """Run `agents` logical agents from now on, without restarting the learner; returns the
        line to show."""

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


def open_launcher(
    backend: str, *, home: Path, namespace: str = "default", context: str | None = None
) -> Launcher:
    """The launcher of `backend` (local, containers or kube)."""
    if backend == "kube":
        from surreal.orchestrator.kube_backend import KubeBackend

        return KubeBackend(namespace=namespace, context=context)
    if backend == "containers":
        from surreal.orchestrator.containers_launcher import ContainersLauncher

        return ContainersLauncher(home)
    if backend == "local":
        from surreal.orchestrator.local_launcher import LocalLauncher

        return LocalLauncher(home)
    raise LauncherError(f"unknown backend {backend!r} (choose one of {', '.join(BACKENDS)})")

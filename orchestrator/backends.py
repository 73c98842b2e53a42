"""The choice of a backend, above the three: `open_launcher(--backend)`, and for the experiments
that live on this machine the dispatch to the launcher that made each one.

Local and containers experiments share `$SURREAL_HOME/experiments/` and each records its backend
in its spec.yaml, so a command that names an experiment reaches the launcher that made it whichever
`--backend` it was given; `list` shows both kinds, and a folder that cannot be read as a row with
its problem.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from surreal.orchestrator import home, plot
from surreal.orchestrator.containers.launcher import ContainersLauncher
from surreal.orchestrator.home_launcher import HomeLauncher, LocalTensorBoard
from surreal.orchestrator.launcher import (
    Forward,
    Launched,
    Launcher,
    LauncherError,
    Placement,
    Watcher,
    check_agents,
    check_port_free,
)
from surreal.orchestrator.local.launcher import LocalLauncher
from surreal.spec import BACKENDS, ExperimentSpec


def open_launcher(
    backend: str, *, home: Path, namespace: str = "default", context: str | None = None
) -> Launcher:
    """The launcher of `backend` (local, containers or kube)."""
    if backend == "kube":
        # Imported here: `kubernetes` takes a while to import, and only this backend needs it.
        from surreal.orchestrator.kube.launcher import KubeLauncher

        return KubeLauncher(namespace=namespace, context=context)
    if backend in ("local", "containers"):
        return HomeDispatch(home, backend)
    raise LauncherError(f"unknown backend {backend!r} (choose one of {', '.join(BACKENDS)})")


class HomeDispatch(Launcher):
    """The experiments in the home, each handled by the launcher of the backend that made it;
    `create` and `dry_run` by the one `--backend` chose."""

    def __init__(self, home_dir: Path, backend: str) -> None:
        self.home = home_dir
        self.backend = backend
        self.launchers: dict[str, HomeLauncher] = {
            "local": LocalLauncher(home_dir),
            "containers": ContainersLauncher(home_dir),
        }

    def owner(self, exp_dir: Path) -> HomeLauncher:
        """The launcher of the backend that made the experiment in `exp_dir`."""
        try:
            backend = str(home.read_spec(exp_dir).get("backend", "local"))
        except LauncherError:  # no or a corrupt spec.yaml: still listed and deletable
            backend = "containers" if (exp_dir / "containers.json").exists() else "local"
        if backend not in self.launchers:
            raise LauncherError(
                f"experiment {exp_dir.name!r} records backend {backend!r}, not one of this home's"
            )
        return self.launchers[backend]

    def _owner(self, name: str) -> tuple[Path, HomeLauncher]:
        exp_dir = home.existing_dir(self.home, name)
        return exp_dir, self.owner(exp_dir)

    def dry_run(self, spec: ExperimentSpec, output: str, placement: Placement) -> str:
        return self.launchers[self.backend].dry_run(spec, output, placement)

    def create(
        self, spec: ExperimentSpec, *, detach: bool, placement: Placement, watch: Watcher | None = None
    ) -> Launched:
        return self.launchers[self.backend].create(spec, detach=detach, placement=placement, watch=watch)

    def list_experiments(self) -> list[dict[str, Any]]:
        rows = []
        for exp_dir in home.list_experiment_dirs(self.home):
            try:
                home.existing_dir(self.home, exp_dir.name)
                rows.append(self.owner(exp_dir).status_of(exp_dir))
            except LauncherError as exc:  # one bad experiment hides no other
                unknown = dict.fromkeys(("algo", "env", "agents", "env_steps", "eval_return"))
                rows.append({**unknown, "name": exp_dir.name, "backend": "?", "phase": "Unknown",
                             "problem": str(exc)})  # fmt: skip
        return rows

    def status(self, name: str) -> dict[str, Any]:
        exp_dir, owner = self._owner(name)
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
        exp_dir, owner = self._owner(name)
        return owner.logs_of(exp_dir, component, follow=follow, lines=lines, previous=previous)

    def scale(self, name: str, agents: int, learner_pods: int | None = None) -> str:
        check_agents(agents)
        exp_dir, owner = self._owner(name)
        return owner.scale_of(exp_dir, agents, learner_pods)

    def delete(self, name: str) -> str:
        exp_dir, owner = self._owner(name)
        owner.delete_of(exp_dir)
        return f"experiment {name!r} deleted"

    def tensorboard(self, name: str, port: int) -> Forward:
        exp_dir, owner = self._owner(name)
        check_port_free(port)
        return LocalTensorBoard(owner.tb_dir(exp_dir), port)

    def events(self, name: str) -> Any:
        exp_dir, owner = self._owner(name)
        return plot.read_events(owner.tb_dir(exp_dir), name)

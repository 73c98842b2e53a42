"""Apply a plan: write its files, then run the provider's tool. The only part that runs anything."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from surreal.provisioner.plans import Plan

# What to install for each tool a plan may run, and the official page that says how.
INSTALL: dict[str, tuple[str, str]] = {
    "kind": ("kind", "https://kind.sigs.k8s.io/docs/user/quick-start/#installation"),
    "minikube": ("minikube", "https://minikube.sigs.k8s.io/docs/start/"),
    "kubectl": ("kubectl", "https://kubernetes.io/docs/tasks/tools/"),
    "gcloud": ("the Google Cloud CLI (gcloud)", "https://cloud.google.com/sdk/docs/install"),
    "eksctl": ("eksctl", "https://docs.aws.amazon.com/eks/latest/eksctl/installation.html"),
    "az": ("the Azure CLI (az)", "https://learn.microsoft.com/cli/azure/install-azure-cli"),
}


def install_hint(tool: str) -> str:
    """`install <what> from <official page>` for a tool a plan runs."""
    what, page = INSTALL.get(tool, (tool, "its official site"))
    return f"install {what} from {page}"


class ProvisionError(RuntimeError):
    """Applying a plan failed; the message is one line that says what to do."""


class ToolNotFoundError(ProvisionError):
    """A tool the plan runs is not on PATH. Nothing was run; the plan's files were written."""

    def __init__(self, missing: list[str], command: list[str], workdir: Path) -> None:
        self.missing = missing
        self.command = command
        installs = "; ".join(install_hint(tool) for tool in missing)
        super().__init__(
            f"{', '.join(missing)} not found on PATH: {installs}; then run again. "
            f"It would have run: cd {shlex.quote(str(workdir))} && {shlex.join(command)}"
        )


class CommandFailedError(ProvisionError):
    """A command of the plan exited non-zero; the ones before it had succeeded."""

    def __init__(self, command: list[str], returncode: int, done: int) -> None:
        self.command = command
        self.returncode = returncode
        super().__init__(
            f"`{shlex.join(command)}` failed with exit code {returncode} "
            f"after {done} command(s) of the plan had succeeded; see its output above"
        )


def write_files(plan: Plan, workdir: Path) -> None:
    """Write the plan's files into `workdir` (created if needed)."""
    workdir.mkdir(parents=True, exist_ok=True)
    for name, text in plan.files.items():
        if Path(name).name != name:
            raise ValueError(f"plan file name {name!r} must be a plain file name")
        (workdir / name).write_text(text)


def apply(plan: Plan, workdir: Path, echo: Callable[[str], None] | None = None) -> None:
    """Write the files into `workdir`, check every tool is on PATH (ToolNotFoundError before
    anything runs), then run the commands in order in `workdir`, their output going straight to
    this process' (CommandFailedError when one fails)."""
    workdir = Path(workdir).resolve()
    try:
        write_files(plan, workdir)
    except OSError as exc:
        raise ProvisionError(f"cannot write the plan's files to {workdir}: {exc.strerror}") from None
    resolved = {tool: shutil.which(tool) for tool in plan.tools}
    missing = [tool for tool, path in resolved.items() if path is None]
    if missing:
        first = next(argv for argv in plan.commands if argv[0] in missing)
        raise ToolNotFoundError(missing, first, workdir)
    for done, argv in enumerate(plan.commands):
        if echo:
            echo(f"+ {shlex.join(argv)}")
        executable = resolved[argv[0]]
        assert executable is not None
        try:
            result = subprocess.run([executable, *argv[1:]], cwd=workdir, check=False)
        except OSError as exc:
            raise ProvisionError(f"cannot run `{shlex.join(argv)}`: {exc}") from None
        if result.returncode != 0:
            raise CommandFailedError(argv, result.returncode, done)

"""apply: writes the files and runs the provider's tool; never a real tool in tests (fakes only)."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from surreal.provisioner import (
    INSTALL,
    PROVIDERS,
    ClusterPlan,
    CommandFailedError,
    NodePool,
    ProvisionError,
    ToolNotFoundError,
    apply,
    build_cluster,
    plan,
)

Calls = Callable[[Path], list[dict[str, Any]]]


def test_kind_apply_runs_kind_with_the_config_in_place(
    fake_tools: Callable[..., Path], tool_calls: Calls, tmp_path: Path
) -> None:
    log = fake_tools("kind")
    rendered = plan(build_cluster("kind", name="rl"))
    workdir = tmp_path / "clusters" / "rl"
    echoed: list[str] = []
    apply(rendered, workdir, echo=echoed.append)
    (call,) = tool_calls(log)
    assert call["argv"] == ["kind", "create", "cluster", "--config", "kind-cluster.yaml", "--name", "rl"]
    assert Path(call["cwd"]) == workdir.resolve()
    # The config was on disk, complete, when kind ran.
    assert call["files"] == rendered.files
    assert yaml.safe_load(call["files"]["kind-cluster.yaml"])["name"] == "rl"
    assert echoed == ["+ kind create cluster --config kind-cluster.yaml --name rl"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_apply_runs_every_command_in_order(
    provider: str, fake_tools: Callable[..., Path], tool_calls: Calls, tmp_path: Path
) -> None:
    rendered = plan(build_cluster(provider))
    log = fake_tools(*rendered.tools)
    apply(rendered, tmp_path / "work")
    assert [call["argv"] for call in tool_calls(log)] == rendered.commands


def test_minikube_apply_uses_minikube_then_kubectl(
    fake_tools: Callable[..., Path], tool_calls: Calls, tmp_path: Path
) -> None:
    log = fake_tools("minikube", "kubectl")
    cpu = NodePool("cpu", "2cpu-4gb", min_nodes=2, max_nodes=2)
    apply(plan(ClusterPlan("dev", "minikube", (cpu,))), tmp_path)
    assert [call["argv"] for call in tool_calls(log)] == [
        ["minikube", "start", "--profile", "dev", "--nodes", "2", "--cpus", "2", "--memory", "4g"],
        ["kubectl", "--context", "dev", "label", "node", "dev", "surreal.io/pool=cpu", "--overwrite"],
        ["kubectl", "--context", "dev", "label", "node", "dev-m02", "surreal.io/pool=cpu", "--overwrite"],
    ]


def test_a_failing_command_stops_the_plan(
    fake_tools: Callable[..., Path], tool_calls: Calls, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = fake_tools("gcloud")
    monkeypatch.setenv("FAKE_EXIT_GCLOUD", "3")
    rendered = plan(build_cluster("gke", name="rl"))
    with pytest.raises(CommandFailedError) as info:
        apply(rendered, tmp_path)
    assert info.value.returncode == 3
    assert info.value.command == rendered.commands[0]
    assert "failed with exit code 3 after 0 command(s)" in str(info.value)
    assert len(tool_calls(log)) == 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_apply_without_the_tool_says_what_to_install(provider: str, no_tools: Path, tmp_path: Path) -> None:
    rendered = plan(build_cluster(provider))
    workdir = tmp_path / "work"
    with pytest.raises(ToolNotFoundError) as info:
        apply(rendered, workdir)
    message = str(info.value)
    tool = rendered.commands[0][0]
    what, page = INSTALL[tool]
    assert f"install {what} from {page}" in message
    assert (
        f"It would have run: cd {shlex.quote(str(workdir.resolve()))} && {shlex.join(rendered.commands[0])}"
        in message
    )
    assert "\n" not in message
    # The files are there, so the printed command works once the tool is installed.
    assert {p.name: p.read_text() for p in workdir.iterdir()} == rendered.files


def test_a_missing_second_tool_stops_before_anything_runs(
    fake_tools: Callable[..., Path], tool_calls: Calls, tmp_path: Path
) -> None:
    log = fake_tools("minikube")  # kubectl missing
    with pytest.raises(ToolNotFoundError) as info:
        apply(plan(build_cluster("minikube")), tmp_path)
    assert info.value.missing == ["kubectl"]
    assert "install kubectl from https://kubernetes.io/docs/tasks/tools/" in str(info.value)
    assert "kubectl --context surreal label node surreal" in str(info.value)
    assert tool_calls(log) == []


def test_install_pages_are_the_official_ones() -> None:
    assert INSTALL["kind"][1] == "https://kind.sigs.k8s.io/docs/user/quick-start/#installation"
    assert INSTALL["minikube"][1] == "https://minikube.sigs.k8s.io/docs/start/"
    assert INSTALL["gcloud"][1] == "https://cloud.google.com/sdk/docs/install"
    assert INSTALL["eksctl"][1] == "https://docs.aws.amazon.com/eks/latest/eksctl/installation.html"
    assert INSTALL["az"][1] == "https://learn.microsoft.com/cli/azure/install-azure-cli"
    every_tool = {argv[0] for p in PROVIDERS for argv in plan(build_cluster(p)).commands}
    assert every_tool <= set(INSTALL)


def test_an_unwritable_workdir_is_a_provision_error(fake_tools: Callable[..., Path], tmp_path: Path) -> None:
    fake_tools("kind")
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ProvisionError, match="cannot write the plan's files to"):
        apply(plan(build_cluster("kind")), blocker / "work")

"""On Kubernetes each replay shard is a pod that asks for its rows' memory (requests = limits): one
past the per-pod ceiling `max_pod_memory_mb` (docs/kubernetes.md) is refused at create and in the
dry run, in one line, exit 2, nothing created; the ceiling is the pod's request, byte for byte."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from surreal.cli import main
from surreal.orchestrator.kube.render import render
from surreal.orchestrator.program import replay_memory_mb
from surreal.spec import DEFAULT_MAX_POD_MEMORY_MB, SpecError, build_spec, check_replay_memory

ROOT = Path(__file__).resolve().parents[2]
SAC = ("--algo", "sac", "--env", "Pendulum-v1")


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _replay_memory(objects: list[dict]) -> str:
    (job,) = [o for o in objects if o["kind"] == "Job" and o["metadata"]["name"].endswith("-replay")]
    resources = job["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources["requests"]["memory"] == resources["limits"]["memory"]
    return str(resources["limits"]["memory"])


def test_the_issues_buffer_is_refused_in_the_kube_dry_run(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "create", "big", *SAC, "--backend", "kube",
                          "--set", "buffer_size=1e10", "--dry-run", "-o", "yaml")  # fmt: skip
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert ("sac.buffer_size 10,000,000,000: the replay shard's pod would ask for 314,969 MiB, over "
            "max_pod_memory_mb (32,768 MiB; docs/kubernetes.md)") in err  # fmt: skip
    assert "max_pod_memory_mb" in (ROOT / "docs" / "kubernetes.md").read_text()


def test_a_raised_ceiling_renders_the_pod_it_allowed(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "create", "big", *SAC, "--backend", "kube",
                          "--set", "buffer_size=1e10", "--set", "max_pod_memory_mb=314969",
                          "--dry-run", "-o", "yaml")  # fmt: skip
    assert code == 0, err
    assert _replay_memory(list(yaml.safe_load_all(out))) == "314969Mi"
    assert "max_pod_memory_mb: 314969" in out  # the spec keeps it: the dry run is a --config as it stands


@pytest.mark.parametrize(("shards", "rows"), [(1, 10**6), (2, 10**9), (5, 123_456_789)])
def test_the_ceiling_is_the_pods_request(shards: int, rows: int) -> None:
    flags = {"algo": "sac", "env": "Pendulum-v1", "backend": "kube", "replay_shards": shards}
    spec = build_spec("x", flags=flags, overrides={"max_pod_memory_mb": str(2**30)})
    spec = dataclasses.replace(spec, config=dataclasses.replace(spec.config, buffer_size=rows))
    request = replay_memory_mb(spec)
    at = dataclasses.replace(spec, max_pod_memory_mb=request)
    check_replay_memory(at)
    assert _replay_memory(render(at, token="t")) == f"{request}Mi"
    with pytest.raises(SpecError, match="max_pod_memory_mb"):
        check_replay_memory(dataclasses.replace(spec, max_pod_memory_mb=request - 1))


def test_the_default_ceiling_is_left_out_of_the_spec() -> None:
    spec = build_spec("x", flags={"algo": "sac", "env": "Pendulum-v1", "backend": "kube"})
    assert spec.max_pod_memory_mb == DEFAULT_MAX_POD_MEMORY_MB
    assert "max_pod_memory_mb" not in spec.to_dict()


@pytest.mark.parametrize("bad", ["0", "-1", "2e30", "lots"])
def test_a_ceiling_that_is_no_memory_size_is_refused(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "create", "x", *SAC, "--backend", "kube",
                          "--set", f"max_pod_memory_mb={bad}", "--dry-run")  # fmt: skip
    assert code == 2 and out == "" and "max_pod_memory_mb" in err and len(err.strip().splitlines()) == 1

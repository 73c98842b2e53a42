"""Fixtures: the transcribed kind/eksctl schemas, and fake provider tools on an isolated PATH."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from jsonschema.protocols import Validator

HERE = Path(__file__).parent

# A stand-in for kind, minikube, kubectl, gcloud, eksctl and az: it records its argv, its working
# directory and the files there (name -> text) as one JSON line, then exits with
# $FAKE_EXIT_<TOOL> (default 0).
FAKE_TOOL = """#!{python}
import json, os, sys
tool = os.path.basename(sys.argv[0])
files = {{n: open(n).read() for n in sorted(os.listdir(".")) if os.path.isfile(n)}}
with open(os.environ["FAKE_TOOL_LOG"], "a") as log:
    log.write(json.dumps({{"argv": [tool, *sys.argv[1:]], "cwd": os.getcwd(), "files": files}}) + "\\n")
sys.exit(int(os.environ.get("FAKE_EXIT_" + tool.upper(), "0")))
"""


def _validator(name: str) -> Validator:
    schema = json.loads((HERE / name).read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


@pytest.fixture(scope="session")
def kind_schema() -> Validator:
    return _validator("kind_v1alpha4_cluster.schema.json")


@pytest.fixture(scope="session")
def eksctl_schema() -> Validator:
    return _validator("eksctl_v1alpha5_clusterconfig.schema.json")


@pytest.fixture
def fake_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Path]:
    """fake_tools("kind", ...) puts fakes of those tools, and nothing else, on PATH; returns the
    log file, one JSON line per call. PATH holds only the fakes, so no real tool can run."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    log = tmp_path / "fake-tools.log"
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("FAKE_TOOL_LOG", str(log))

    def install(*tools: str) -> Path:
        for tool in tools:
            script = bin_dir / tool
            script.write_text(FAKE_TOOL.format(python=sys.executable))
            script.chmod(0o755)
        return log

    return install


def read_log(log: Path) -> list[dict[str, Any]]:
    """The calls recorded by the fake tools, in order ([] when none ran)."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.fixture
def tool_calls() -> Callable[[Path], list[dict[str, Any]]]:
    return read_log


@pytest.fixture
def no_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty PATH: every provider tool is missing."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    return empty

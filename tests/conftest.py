from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
CONTAINERS = TESTS / "containers"
# cli_world (the installed command run in-process) serves the CLI tests of every layer.
sys.path.insert(0, str(TESTS / "surreal"))
# Creates measure nothing (one agent an actor worker, as before the sizing) unless a test asks: the
# packing a test proves something with stays the one it names, and no create spends seconds
# measuring. tests/orchestrator/test_sizing.py measures, and so does the README's job.
os.environ["SURREAL_NO_CALIBRATE"] = "1"


@pytest.fixture
def surreal_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty SURREAL_HOME for one test."""
    home = tmp_path / "home"
    monkeypatch.setenv("SURREAL_HOME", str(home))
    return home


def _order(item: pytest.Item) -> int:
    """The slow tests first, then the container tests, then the rest: the image build (started at
    collection, tests/containers/image_build.py) takes minutes on a fresh machine, which the slow
    tests fill, and under pytest-xdist (`make test`, _Xdist) the many short tests last fill the
    workers' ends evenly."""
    if CONTAINERS in Path(item.path).parents:
        return 1
    return 0 if item.get_closest_marker("slow") else 2


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_order)


class _Xdist:
    """The suite under pytest-xdist (`make test`, `-n 2`), as the controller sees it.

    Scheduling: each test is a unit of its own, sent to the next free worker in collection order
    (see _order), except a container test file, which is one unit: its tests share runs and
    experiment names (two `intr` runs at once would collide) and so run one after another on one
    worker, while two files may run at once. (xdist's own `--dist loadgroup` loses its groups with
    pytest 9.2's structured node ids, pytest-dev/pytest-xdist#1386.)

    The image build: the controller collects nothing itself; it starts the build once the first
    worker's collection names a container test."""

    def __init__(self, config: pytest.Config) -> None:
        self.config, self.started = config, False

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: object) -> object:
        from xdist.scheduler import LoadScopeScheduling

        class SuiteScheduling(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                return nodeid.split("::", 1)[0] if nodeid.startswith("tests/containers/") else nodeid

        config.option.loadscopereorder = False  # keep the collection order
        return SuiteScheduling(config, log)  # type: ignore[arg-type]

    @pytest.hookimpl
    def pytest_xdist_node_collection_finished(self, node: object, ids: list[str]) -> None:
        if self.started or not any(i.startswith("tests/containers/") for i in ids):
            return
        self.started = True
        sys.path.insert(0, str(CONTAINERS))
        from image_build import EarlyBuild

        EarlyBuild.start(self.config)


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_Xdist(config), "surreal-xdist")

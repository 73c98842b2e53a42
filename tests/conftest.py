from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def surreal_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty SURREAL_HOME for one test."""
    home = tmp_path / "home"
    monkeypatch.setenv("SURREAL_HOME", str(home))
    return home


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The container tests run last: their image build starts at collection
    (tests/containers/conftest.py) and takes minutes on a fresh machine, which the other tests
    fill. Otherwise the order is pytest's."""
    containers = Path(__file__).parent / "containers"
    items.sort(key=lambda item: containers in Path(item.path).parents)

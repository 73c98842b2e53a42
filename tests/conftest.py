from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def surreal_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty SURREAL_HOME for one test."""
    home = tmp_path / "home"
    monkeypatch.setenv("SURREAL_HOME", str(home))
    return home

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from cli_harness import Cli


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    """The installed `surreal` with its own SURREAL_HOME; whatever a failed test left running
    (its command line names that SURREAL_HOME) is killed afterwards."""
    c = Cli(tmp_path / "home")
    yield c
    for proc in c.leftovers():
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()

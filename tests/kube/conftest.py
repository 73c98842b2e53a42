from __future__ import annotations

import sys
from pathlib import Path

import pytest

# fake_api.py and kube_support.py sit beside the tests (tests/ is not a package).
sys.path.insert(0, str(Path(__file__).parent))

from kube_support import ALGOS  # noqa: E402


@pytest.fixture(params=ALGOS)
def algo(request: pytest.FixtureRequest) -> str:
    """Every algorithm of the registry that runs on Kubernetes (kube_support.ALGOS)."""
    return str(request.param)

"""Real containers for the tests of this folder: an engine, and the project's image built from this
tree (image_build.py: rebuilt whenever a file that goes into it changes).

Without podman or Docker these tests skip, except under CI, where .ci/run installs podman and a
missing engine is a failure.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from harness import ids  # noqa: E402
from image_build import IMAGE, EarlyBuild, build_image  # noqa: E402

from surreal.orchestrator.containers import plan as containers_plan  # noqa: E402
from surreal.orchestrator.containers import run as containers_run  # noqa: E402


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pods")


@pytest.fixture(scope="session")
def engine(workdir: Path) -> containers_run.Engine:
    try:
        return containers_run.engine_for(workdir)
    except containers_plan.ContainersError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"{exc} (CI runs the container tests: .ci/run installs podman)")
        pytest.skip(str(exc))


def pytest_collection_finish(session: pytest.Session) -> None:
    """A session without pytest-xdist starts the build here; under xdist the controller does
    (tests/conftest.py), and a worker's `image` waits for it through the build lock."""
    here = Path(__file__).parent
    if session.config.option.collectonly or hasattr(session.config, "workerinput"):
        return
    if any(here in Path(i.path).parents for i in session.items):
        EarlyBuild.start(session.config)


@pytest.fixture(scope="session")
def image(engine: containers_run.Engine) -> str:
    """surreal:local, built from this tree unless the image already has this tree's hash (started
    early by EarlyBuild; otherwise built here, or waited for while another process builds it)."""
    if EarlyBuild.thread is not None:
        EarlyBuild.thread.join()
        error = EarlyBuild.error
    else:
        error = build_image(engine)
    if error:
        pytest.fail(error)
    return IMAGE


@pytest.fixture
def left_behind(engine: containers_run.Engine) -> Iterator[list[str]]:
    """The test appends the ids of the harness runs it starts; after it, no container of those
    runs is left (any found is removed, and the test errs). Runs of other tests, which may run
    at the same time under pytest-xdist, are not looked at."""
    runs: list[str] = []
    yield runs
    leftover = [c for run_id in runs for c in ids(engine, run_id)]
    if leftover:
        engine("rm", "--force", "--time", "2", *leftover, check=False, timeout=180)
    assert not leftover, f"containers left behind: {leftover}"

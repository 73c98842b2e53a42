"""Real containers for the tests of this folder: an engine, and the project's image built from this
tree (rebuilt whenever a file that goes into it changes).

Without podman or Docker these tests skip, except under CI, where .ci/run installs podman and a
missing engine is a failure. What is specific to a machine stays here, not in the Dockerfile: a
podman build gets the machine's pip configuration, the files and folders it names and its CA
bundle mounted read-only, so a machine that reaches PyPI only through a mirror or local wheel
folders builds the image too; nothing of it ends up in a layer.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from harness import ids

from surreal.orchestrator.containers import plan as containers_plan
from surreal.orchestrator.containers import run as containers_run  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
IMAGE = "surreal:local"  # what `make image` builds and what rendered objects name by default
SOURCE_LABEL = "surreal.source"
CONTEXT = ("Dockerfile", ".dockerignore", "pyproject.toml", "README.md")
PACKAGES = ("surreal", "protocol", "orchestrator", "provisioner", "algorithms")


def source_hash(repo: Path = REPO) -> str:
    """What the image is made of: the build files and every package file, by content."""
    digest = hashlib.sha256()
    files = [repo / f for f in CONTEXT]
    for folder in PACKAGES:
        files += sorted(p for p in (repo / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for path in files:
        digest.update(str(path.relative_to(repo)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def pip_config_mounts(home: Path | None = None) -> list[str]:
    """`--volume` flags that give a build's RUN steps this machine's pip configuration: its files
    at the places pip reads them in the image (HOME=/tmp there), and every absolute path or file://
    URL they name (wheel folders, local indexes, the CA bundle, constraints), read-only."""
    home = home or Path.home()
    files = {
        Path("/etc/pip.conf"): "/etc/pip.conf",
        Path("/etc/xdg/pip/pip.conf"): "/etc/xdg/pip/pip.conf",
        home / ".config/pip/pip.conf": "/tmp/.config/pip/pip.conf",
        home / ".pip/pip.conf": "/tmp/.pip/pip.conf",
    }
    if os.environ.get("PIP_CONFIG_FILE"):
        files[Path(os.environ["PIP_CONFIG_FILE"])] = "/etc/pip.conf"
    mounts: dict[str, str] = {}
    named: set[str] = set()
    for source, target in files.items():
        if not source.is_file():
            continue
        mounts[target] = str(source)
        for value in re.findall(r"(?:file://)?(/[^\s'\"]+)", source.read_text()):
            path = Path(value.rstrip("/"))
            # A local index's pages (DIR/simple/...) link to files beside them: mount DIR.
            named.add(str(path.parent if path.name == "simple" else path))
    for key in (
        "PIP_CERT",
        "PIP_FIND_LINKS",
        "PIP_CONSTRAINT",
    ):  # env reaches no RUN step: mount what it names
        named.update(v.removeprefix("file://").rstrip("/") for v in os.environ.get(key, "").split() if v)
    for path in sorted(named):
        if Path(path).exists() and path not in mounts:
            mounts[path] = path
    return [f"--volume={source}:{target}:ro" for target, source in sorted(mounts.items())]


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


def build_image(engine: containers_run.Engine, started: Callable[[subprocess.Popen[str]], None] | None = None,
                ) -> str | None:  # fmt: skip
    """Build surreal:local from this tree unless the image already has this tree's hash. None when
    it is there, else what went wrong (the build's last lines). `started` gets the build's process."""
    want = source_hash()
    label = '{{index .Config.Labels "' + SOURCE_LABEL + '"}}'
    have = engine("image", "inspect", "--format", label, IMAGE, check=False).strip()
    if have == want:
        return None
    flags = [f"--label={SOURCE_LABEL}={want}"]
    if engine.name == "podman":
        flags += pip_config_mounts()
    env = {**engine.env, "IMAGE": IMAGE, "ENGINE": engine.name, "IMAGE_BUILD_FLAGS": " ".join(flags)}
    with subprocess.Popen(
        ["bash", str(REPO / "scripts/image.sh")], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, stdin=subprocess.DEVNULL, start_new_session=True,
    ) as proc:  # fmt: skip
        if started is not None:
            started(proc)
        try:
            out, _ = proc.communicate(timeout=1500)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
    if proc.returncode != 0:
        tail = "\n".join(out.strip().splitlines()[-15:])
        return f"make image failed (exit {proc.returncode}):\n{tail}"
    return None


class EarlyBuild:
    """The image build, started as soon as the session knows it will run tests of this folder:
    a fresh machine's build (base image, torch, the project) takes minutes, mostly downloading
    and unpacking, and the tests that run before these (tests/conftest.py puts this folder last)
    fill that time. The `image` fixture waits for it; a session that ends first stops it."""

    thread: threading.Thread | None = None
    process: subprocess.Popen[str] | None = None
    error: str | None = None

    @classmethod
    def start(cls, config: pytest.Config) -> None:
        workdir = Path(tempfile.mkdtemp(prefix="surreal-image-build-"))
        config.add_cleanup(lambda: cls.stop(workdir))
        try:
            engine = containers_run.engine_for(workdir)
        except containers_plan.ContainersError:
            return  # the engine fixture skips or fails, with its reason

        def build() -> None:
            try:
                cls.error = build_image(engine, started=lambda proc: setattr(cls, "process", proc))
            except Exception as exc:  # noqa: BLE001  (the fixture reports it; a thread would lose it)
                cls.error = f"make image failed: {exc!r}"

        cls.thread = threading.Thread(target=build, name="image-build", daemon=True)
        cls.thread.start()

    @classmethod
    def stop(cls, workdir: Path) -> None:
        if cls.process is not None and cls.process.poll() is None:
            os.killpg(cls.process.pid, signal.SIGTERM)
        if cls.thread is not None:
            cls.thread.join(timeout=60)
        shutil.rmtree(workdir, ignore_errors=True)


def pytest_collection_finish(session: pytest.Session) -> None:
    here = Path(__file__).parent
    if session.config.option.collectonly or not any(here in Path(i.path).parents for i in session.items):
        return
    EarlyBuild.start(session.config)


@pytest.fixture(scope="session")
def image(engine: containers_run.Engine) -> str:
    """surreal:local, built from this tree unless the image already has this tree's hash (started
    early by EarlyBuild; built here when it was not)."""
    if EarlyBuild.thread is not None:
        EarlyBuild.thread.join()
        error = EarlyBuild.error
    else:
        error = build_image(engine)
    if error:
        pytest.fail(error)
    return IMAGE


@pytest.fixture
def no_leftovers(engine: containers_run.Engine) -> Iterator[None]:
    """After the test, no container of a harness run it started is left. Runs that were there
    before it (another session's, a `surreal create --backend containers`) are neither counted nor removed."""
    before = set(ids(engine))
    yield
    leftover = [c for c in ids(engine) if c not in before]
    if leftover:
        engine("rm", "--force", "--time", "2", *leftover, check=False, timeout=180)
    assert not leftover, f"containers left behind: {leftover}"

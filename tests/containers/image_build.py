"""The project's image for the container tests, built from this tree: once per machine at a time
(a lock file: under pytest-xdist every worker may ask for it, and the controller starts it early),
and again only when a file that goes into it changed.

What is specific to a machine stays here, not in the Dockerfile: a podman build gets the machine's
pip configuration, the files and folders it names and its CA bundle mounted read-only, so a machine
that reaches PyPI only through a mirror or local wheel folders builds the image too; nothing of it
ends up in a layer.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from surreal.orchestrator.containers import plan as containers_plan
from surreal.orchestrator.containers import run as containers_run

REPO = Path(__file__).resolve().parents[2]
IMAGE = "surreal:local"  # what `make image` builds and what rendered objects name by default
SOURCE_LABEL = "surreal.source"
CONTEXT = ("Dockerfile", ".dockerignore", "pyproject.toml", "README.md")
PACKAGES = ("surreal", "protocol", "orchestrator", "provisioner", "algorithms", "runtime", "examples")


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


def build_image(engine: containers_run.Engine, started: Callable[[subprocess.Popen[str]], None] | None = None,
                ) -> str | None:  # fmt: skip
    """Build surreal:local from this tree unless the image already has this tree's hash. None when
    it is there, else what went wrong (the build's last lines). `started` gets the build's process."""
    with _build_lock():
        return _build(engine, started)


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    """One build of surreal:local at a time on this machine; a second caller waits for the first
    and then finds the image there."""
    path = Path(tempfile.gettempdir()) / "surreal-image-build.lock"
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(
    engine: containers_run.Engine, started: Callable[[subprocess.Popen[str]], None] | None
) -> str | None:
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
    """The image build, started as soon as the session knows it will run tests of tests/containers
    (by the process that runs them, or by pytest-xdist's controller, tests/conftest.py): a fresh
    machine's build (base image, torch, the project) takes minutes, mostly downloading and
    unpacking, and the tests scheduled before these fill that time. The `image` fixture waits for
    it (a worker through the build lock); a session that ends first stops it."""

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

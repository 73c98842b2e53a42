"""Bad input to the container harness: one clear line, a non-zero exit, nothing left running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import podkube
import pytest
from test_pods import render

HARNESS = Path(podkube.__file__)


def run_cli(
    *args: str, env: dict[str, str] | None = None, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(HARNESS), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env or dict(os.environ),
        timeout=120,
    )


def test_no_engine_installed_is_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    proc = run_cli("up", "-", env={**os.environ, "PATH": str(empty)}, stdin="kind: ConfigMap\n")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "podkube: no container engine: install podman (apt-get install podman runc) or start Docker"
    ]


def test_objects_that_are_not_an_experiment_are_one_line(engine: podkube.Engine) -> None:
    proc = run_cli("up", "-", stdin="a: 1\n")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "expected Kubernetes objects" in proc.stderr


@pytest.mark.slow
def test_an_image_that_does_not_exist(engine: podkube.Engine, tmp_path: Path, no_leftovers: None) -> None:
    objects = render("noimg", "--algo", "ppo", "--image", "localhost/surreal:no-such-tag", tmp=tmp_path)
    plan = podkube.translate(objects, workdir=tmp_path)
    with pytest.raises(podkube.HarnessError, match=r"image localhost/surreal:no-such-tag does not exist"):
        with podkube.Run(plan, engine):
            pass
    assert not engine.ids(plan.run_id)


@pytest.mark.slow
def test_a_container_that_exits_at_start(
    engine: podkube.Engine, image: str, tmp_path: Path, no_leftovers: None
) -> None:
    objects = render("crash", "--algo", "ppo", tmp=tmp_path)
    learner = next(o for o in objects if o["kind"] == "StatefulSet")["spec"]["template"]["spec"][
        "containers"
    ][0]
    learner["args"] = [
        a.replace("/etc/surreal/spec.yaml", "/etc/surreal/missing.yaml") for a in learner["args"]
    ]
    plan = podkube.translate(objects, workdir=tmp_path)
    with podkube.Run(plan, engine) as run:
        with pytest.raises(podkube.HarnessError) as err:
            run.wait_for("the learner", lambda: run.probe(run.pod("learner")), 180)
    message = str(err.value)
    assert message.startswith("container crash-learner-0 exits at start (exit code ") and "\n" not in message
    assert "missing.yaml" in message  # the learner's own last word says why
    assert not engine.ids(plan.run_id)


@pytest.mark.slow
def test_ctrl_c_removes_every_container_and_network(
    engine: podkube.Engine, image: str, tmp_path: Path, no_leftovers: None
) -> None:
    objects_file = tmp_path / "objects.yaml"
    objects_file.write_text(
        subprocess.run(
            [
                sys.executable,
                "-m",
                "surreal",
                "create",
                "intr",
                "--algo",
                "ppo",
                "--backend",
                "kube",
                "--dry-run",
                "-o",
                "yaml",
            ],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "SURREAL_HOME": str(tmp_path)},
        ).stdout
    )
    proc = subprocess.Popen(
        [sys.executable, str(HARNESS), "up", str(objects_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = proc.stdout.readline() if proc.stdout else ""
        run_id = first.split()[1].rstrip(":")
        deadline = time.monotonic() + 120
        while len(engine.ids(run_id)) < 5 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert len(engine.ids(run_id)) == 5, first
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert err.strip().splitlines()[-1] == "podkube: interrupted; everything this run made is removed"
    assert not engine.ids(run_id)
    assert not engine("network", "ls", "-q", "--filter", f"label={podkube.RUN_LABEL}={run_id}").split()

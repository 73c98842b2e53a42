"""Bad input to the containers backend's plan and run: one clear line, nothing left running. (The
CLI's bad input, no engine, a missing image and Ctrl-C, is in test_backend.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import HarnessRun
from test_pods import render

from surreal.orchestrator.containers import plan as containers_plan
from surreal.orchestrator.containers import run as containers_run


def test_objects_that_are_not_an_experiment_are_one_line() -> None:
    with pytest.raises(containers_plan.ContainersError, match="no ConfigMap holding spec.yaml"):
        containers_plan.translate(
            [{"kind": "Service", "metadata": {"name": "s"}}], workdir=Path("/nonexistent")
        )


@pytest.mark.slow
def test_an_image_that_does_not_exist(
    engine: containers_run.Engine, tmp_path: Path, left_behind: list[str]
) -> None:
    objects = render("noimg", "--algo", "ppo", "--image", "localhost/surreal:no-such-tag", tmp=tmp_path)
    plan = containers_plan.translate(objects, workdir=tmp_path)
    left_behind.append(plan.run_id)
    with pytest.raises(
        containers_plan.ContainersError, match=r"image localhost/surreal:no-such-tag does not exist"
    ):
        with HarnessRun(plan, engine):
            pass


@pytest.mark.slow
def test_a_container_that_exits_at_start(
    engine: containers_run.Engine, image: str, tmp_path: Path, left_behind: list[str]
) -> None:
    objects = render("crash", "--algo", "ppo", tmp=tmp_path)
    job = next(o for o in objects if o["kind"] == "Job" and o["metadata"]["name"] == "crash-learner")
    job["spec"]["backoffLimit"] = 1  # two tries, as a Job would make them
    learner = job["spec"]["template"]["spec"]["containers"][0]
    learner["args"] = [
        a.replace("/etc/surreal/spec.yaml", "/etc/surreal/missing.yaml") for a in learner["args"]
    ]
    plan = containers_plan.translate(objects, workdir=tmp_path)
    left_behind.append(plan.run_id)
    with HarnessRun(plan, engine) as run:
        with pytest.raises(containers_plan.ContainersError) as err:
            run.wait_for("the learner", lambda: run.probe(run.pod("learner")), 180)
    message = str(err.value)
    assert message.startswith("Job crash-learner failed (BackoffLimitExceeded: ") and "\n" not in message
    assert " ended (exit code " in message  # how its last pod ended, as local says it
    assert "missing.yaml" in message  # the learner's own last word says why
    assert len(run.pods_of("learner")) == 1 and len([p for p in run.started if p.role == "learner"]) == 2

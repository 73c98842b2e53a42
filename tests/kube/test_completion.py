"""A finished run on Kubernetes: components exit, their Jobs complete, and the final numbers stay
readable (the learner's termination message, the Jobs' conditions). Pure: hand-written API JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kube_support import make_spec

from surreal import component
from surreal.orchestrator.kube import observe as ks
from surreal.orchestrator.kube import render as kr
from surreal.orchestrator.program import ENV_TERMINATION_LOG


def pod(name: str, role: str, state: dict[str, Any], ready: bool = False) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"surreal.io/component": role}},
            "status": {"containerStatuses": [{"name": role, "ready": ready, "restartCount": 0,
                                              "state": state}]}}  # fmt: skip


def ended(code: int, message: str = "", at: str = "2026-11-25T10:00:00Z") -> dict[str, Any]:
    return {"terminated": {"exitCode": code, "message": message, "finishedAt": at}}


def job(role: str, *conditions: str, suspend: bool = False, **status: Any) -> dict[str, Any]:
    conds = [{"type": c, "status": "True", "reason": f"{c}Reason", "message": f"{c} says why"}
             for c in conditions]  # fmt: skip
    return {"metadata": {"name": f"exp1-{role}", "labels": {"surreal.io/component": role}},
            "spec": {"completions": 1, **({"suspend": True} if suspend else {})},
            "status": {"conditions": conds, **status}}  # fmt: skip


def test_only_the_learner_writes_its_final_status_to_the_termination_log() -> None:
    program = kr.kube_program(make_spec())
    assert program.component("learner").env[ENV_TERMINATION_LOG] == "/dev/termination-log"
    assert all(ENV_TERMINATION_LOG not in c.env for c in program.components if c.role != "learner")


@pytest.mark.parametrize(("code", "phase"), [(0, "Succeeded"), (143, "Preempted"), (1, None)])
def test_the_termination_message_is_the_final_status_in_brief(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, phase: str | None
) -> None:
    status = {"env_steps": 100_352, "updates": 49, "policy_version": 50, "eval_return": 500.0,
              "checkpoint_version": 50, "wire_rejections": {"x": 0}, "episodes": 1234}  # fmt: skip
    (tmp_path / "status.json").write_text(json.dumps(status))
    log = tmp_path / "termination-log"
    monkeypatch.setenv(ENV_TERMINATION_LOG, str(log))
    component.write_termination_message(tmp_path, code)
    if phase is None:  # a crash: the pod's FallbackToLogsOnError shows the log's tail instead
        assert not log.exists()
        return
    message = json.loads(log.read_text())
    assert message["phase"] == phase and message["exit_code"] == code
    assert message["updates"] == 49 and message["eval_return"] == 500.0
    assert "wire_rejections" not in message and len(log.read_bytes()) < 4096


def test_status_after_the_end_comes_from_the_termination_message() -> None:
    done = json.dumps({"phase": "Succeeded", "env_steps": 100_352, "updates": 49, "eval_return": 500.0})
    preempted = json.dumps({"phase": "Preempted", "env_steps": 50_000, "updates": 20})
    pods = [
        pod("exp1-learner-0-aaaaa", "learner", ended(143, preempted, "2026-11-25T09:00:00Z")),
        pod("exp1-learner-0-bbbbb", "learner", ended(0, done)),
        pod("exp1-actor-0-ccccc", "actor", ended(0)),
    ]
    jobs = [job("learner", "Complete", succeeded=1, failed=0), job("actor", "Complete", succeeded=1)]
    out = ks.status({"name": "exp1"}, pods, {}, "the learner pod is not ready", jobs=jobs)
    assert out["phase"] == "Succeeded"
    assert (out["env_steps"], out["updates"], out["eval_return"]) == (100_352, 49, 500.0)
    assert [j["state"] for j in out["jobs"]] == ["Complete", "Complete"]
    assert out["jobs"][0]["completions"] == "1/1" and "problem" not in out


def test_a_learner_job_past_its_retries_fails_the_experiment_and_says_why() -> None:
    pods = [pod("exp1-learner-0-aaaaa", "learner", ended(1, "Traceback ... ValueError: boom"))]
    jobs = [job("learner", "Failed", failed=6), job("actor")]
    out = ks.status({"name": "exp1"}, pods, {}, "the learner pod is not ready", jobs=jobs)
    assert out["phase"] == "Failed"
    assert out["problem"] == "exp1-learner: FailedReason: Failed says why"
    assert out["jobs"][0]["failed"] == 6


def test_suspended_jobs_are_a_queued_experiment() -> None:
    jobs = [job("learner", suspend=True), job("actor", suspend=True)]
    out = ks.status({"name": "exp1", "queue": "team-a"}, [], {}, "the learner pod is not ready", jobs=jobs)
    assert out["phase"] == "Pending" and out["queued"] == "team-a"


def test_a_failed_actor_job_fails_a_running_experiment() -> None:
    running = pod("exp1-learner-0-aaaaa", "learner", {"running": {}}, ready=True)
    assert ks.phase([running], {}, [job("learner"), job("actor")]) == "Running"
    assert ks.phase([running], {}, [job("learner"), job("actor", "Failed")]) == "Failed"


def test_a_learner_reporting_done_is_succeeded_while_its_pod_still_runs() -> None:
    running = pod("exp1-learner-0-aaaaa", "learner", {"running": {}}, ready=True)
    assert ks.phase([running], {"done": False}) == "Running"
    assert ks.phase([running], {"done": True}) == "Succeeded"

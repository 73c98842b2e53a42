"""What pods say, in the words of `surreal status` (pure; hand-written pod JSON)."""

from __future__ import annotations

from typing import Any

import pytest

from surreal.orchestrator.kube import observe as ks
from surreal.orchestrator.kube.errors import KubeError


def pod(name: str, role: str, state: dict, *, ready: bool = False, last: dict | None = None,
        restarts: int = 0, deleting: bool = False) -> dict[str, Any]:  # fmt: skip
    meta: dict[str, Any] = {"name": name, "labels": {"surreal.io/component": role}}
    if deleting:
        meta["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    status = {"name": role, "ready": ready, "restartCount": restarts, "state": state,
              "lastState": last or {}}  # fmt: skip
    return {"metadata": meta, "status": {"phase": "Running", "containerStatuses": [status]}}


RUNNING = {"running": {"startedAt": "x"}}
FINISHED = '{"phase": "Succeeded", "exit_code": 0, "env_steps": 1000}'
CRASHLOOP = {"waiting": {"reason": "CrashLoopBackOff"}}


@pytest.mark.parametrize(
    ("learner", "phase"),
    [
        (None, "Pending"),
        (pod("l", "learner", RUNNING, ready=True), "Running"),
        (pod("l", "learner", RUNNING, ready=False), "Pending"),
        (pod("l", "learner", {"waiting": {"reason": "ContainerCreating"}}), "Pending"),
        # Done: the learner exited 0; Kubernetes restarts it, but the run is over.
        (pod("l", "learner", CRASHLOOP, last={"terminated": {"exitCode": 0}}, restarts=3), "Succeeded"),
        (pod("l", "learner", {"terminated": {"exitCode": 0, "message": FINISHED}}), "Succeeded"),
        # Exit 0 without the termination message every finished learner leaves: its process was
        # ended early (an update that called os._exit(0)), not its run.
        (pod("l", "learner", {"terminated": {"exitCode": 0}}), "Failed"),
        # ...but a learner pod past the first (--learner-pods) ends in silence by design.
        (pod("e-learner-peers-0-x", "learner", {"terminated": {"exitCode": 0}}), "Succeeded"),
        (pod("l", "learner", CRASHLOOP, last={"terminated": {"exitCode": 1}}, restarts=4), "Failed"),
        (pod("l", "learner", {"waiting": {"reason": "ImagePullBackOff"}}), "Failed"),
    ],
)
def test_phase_follows_the_learner(learner: dict | None, phase: str) -> None:
    actors = [pod("a", "actor", RUNNING, ready=True)]
    assert ks.phase(actors + ([learner] if learner else [])) == phase


@pytest.mark.parametrize(
    ("p", "state"),
    [
        (pod("x", "actor", RUNNING, ready=True), "Running"),
        (pod("x", "actor", RUNNING), "Starting"),
        (pod("x", "actor", {"terminated": {"exitCode": 137}}), "Error(137)"),
        (pod("x", "actor", {"terminated": {"exitCode": 0}}), "Completed"),
        (pod("x", "actor", CRASHLOOP), "CrashLoopBackOff"),
        (pod("x", "actor", RUNNING, ready=True, deleting=True), "Terminating"),
        ({"metadata": {"name": "x", "labels": {}}, "status": {"phase": "Pending"}}, "Pending"),
    ],
)
def test_pod_state_is_one_word(p: dict, state: str) -> None:
    assert ks.pod_state(p) == state


@pytest.mark.parametrize(
    ("word", "state", "detail"),
    [("Completed", "Succeeded", ""), ("Error(3)", "Failed", "exit code 3"),
     ("Error(143)", "Stopped", "exit code 143 (preempted after a checkpoint)"),
     ("CrashLoopBackOff", "Restarting", "CrashLoopBackOff"),
     ("ContainerCreating", "Starting", "ContainerCreating"),
     ("Starting", "Starting", ""), ("Running", "Running", ""), ("Terminating", "Running", "terminating"),
     ("ImagePullBackOff", "Pending", "ImagePullBackOff"), ("Pending", "Pending", "")],
)  # fmt: skip
def test_every_pod_state_is_one_of_the_contracts(word: str, state: str, detail: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Kubernetes' words for a pod become the status contract's ComponentState, the same words
    the local backend uses, with Kubernetes' own word kept as the detail."""
    monkeypatch.setattr(ks, "pod_state", lambda _pod: word)
    assert ks.component_state({}) == (state, detail)


def test_components_are_listed_learner_first_with_restarts() -> None:
    pods = [pod("e-actor-b", "actor", RUNNING, ready=True, restarts=2),
            pod("e-evaluator-x", "evaluator", RUNNING),
            pod("e-actor-a", "actor", CRASHLOOP),
            pod("e-learner-0", "learner", RUNNING, ready=True)]  # fmt: skip
    rows = ks.components(pods)
    assert [r["name"] for r in rows] == ["e-learner-0", "e-actor-a", "e-actor-b", "e-evaluator-x"]
    assert rows[2] == {"name": "e-actor-b", "role": "actor", "state": "Running", "restarts": 2,
                       "detail": ""}  # fmt: skip
    assert (rows[1]["state"], rows[1]["detail"]) == ("Restarting", "CrashLoopBackOff")


def test_pick_pod_by_role_number_or_name() -> None:
    pods = [pod("e-actor-b", "actor", RUNNING, ready=True), pod("e-actor-a", "actor", CRASHLOOP)]
    assert ks.pick_pod(pods, "actor", "e") == ("e-actor-b", "actor")  # a running one first
    assert ks.pick_pod(pods, "actor-0", "e") == ("e-actor-a", "actor")  # by name order
    assert ks.pick_pod(pods, "e-actor-a", "e") == ("e-actor-a", "actor")
    with pytest.raises(KubeError, match="no component 'critic' in experiment 'e'"):
        ks.pick_pod(pods, "critic", "e")
    with pytest.raises(KubeError, match="has 0 learner pod"):
        ks.pick_pod(pods, "learner", "e")


def test_status_keeps_the_contract_keys_even_without_metrics() -> None:
    spec = {"name": "e", "algo": "ppo", "env": "CartPole-v1", "agents": 2, "steps": 10, "namespace": "n"}
    st = ks.status(spec, [], {}, "the learner pod is not ready")
    for key in ("name", "algo", "env", "backend", "phase", "env_steps", "updates", "policy_version",
                "episodes", "train_return", "eval_return", "steps_per_second", "elapsed_seconds",
                "components"):  # fmt: skip
        assert key in st
    assert st["backend"] == "kube" and st["phase"] == "Pending" and st["components"] == []


def test_a_learner_that_failed_for_good_says_why_in_the_problem() -> None:
    spec = {"name": "e", "algo": "ppo", "env": "CartPole-v1", "agents": 2, "steps": 10, "namespace": "n"}
    why = "learner rank 1 of 2 did not join the group within 60 s"
    message = f'{{"phase":"Failed","exit_code":70,"reason":"{why}"}}'
    learner = pod("e-learner-0", "learner", {"terminated": {"exitCode": 70, "message": message}})
    job = {"metadata": {"name": "e-learner", "labels": {"surreal.io/component": "learner"}},
           "spec": {"completions": 1},
           "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "PodFailurePolicy",
                                      "message": "Container learner failed with exit code 70"}]}}  # fmt: skip
    st = ks.status(spec, [learner], {}, jobs=[job])
    assert st["phase"] == "Failed"
    assert st["problem"] == (
        f"e-learner: PodFailurePolicy: Container learner failed with exit code 70; learner: {why}"
    )

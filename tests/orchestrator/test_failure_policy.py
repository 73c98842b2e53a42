"""One failure policy (orchestrator/policy.py), the same outcome on every backend: the same exit
histories through the local supervisor's decision, the containers Job controller (on the Jobs
rendered for Kubernetes, translated as the containers backend runs them) and the rendered Jobs'
own fields give the same outcomes. Pure: no process is started."""

from __future__ import annotations

from pathlib import Path

import pytest

from surreal.orchestrator.containers.jobs import JobController, job_policy
from surreal.orchestrator.containers.jobs import PodAction as JobAction
from surreal.orchestrator.containers.plan import translate
from surreal.orchestrator.kube import observe as kube_status
from surreal.orchestrator.kube.render import render
from surreal.orchestrator.policy import (
    POLICIES,
    RETRIES,
    Action,
    Decision,
    RoleEnd,
    RolePolicy,
    decide,
    outcome,
    role_failure,
)
from surreal.runtime.exits import EXIT_LEARNER_GONE, EXIT_PREEMPTED
from surreal.spec import build_spec

CRASH, KILLED = 1, 137


def test_decide_by_hand() -> None:
    p = RolePolicy(retries=2, fatal_exits=(69,), backoff_seconds=0.5, max_backoff_seconds=1.5)
    assert decide(p, 0, 0).action is Action.DONE
    assert decide(p, 69, 0).action is Action.FAIL_ROLE
    assert (
        decide(p, EXIT_PREEMPTED, 2) == decide(p, EXIT_PREEMPTED, 0) == Decision(Action.REPLACE, 0.0, False)
    )
    assert [decide(p, CRASH, n).delay for n in range(2)] == [0.5, 1.0]
    assert decide(RolePolicy(retries=9, max_backoff_seconds=1.5), CRASH, 5).delay == 1.5
    assert decide(p, CRASH, 2) == Decision(Action.GIVE_UP, 0.0, True)


def local_outcome(role: str, history: list[int]) -> str:
    """What the local supervisor makes of `history` (one worker's exits): it calls `decide`."""
    counted = 0
    for code in history:
        d = decide(POLICIES[role], code, counted)
        counted += d.counted
        if d.action is not Action.REPLACE:
            return {Action.DONE: "done", Action.GIVE_UP: "failed", Action.FAIL_ROLE: "failed"}[d.action]
    return "running"


@pytest.fixture(scope="module")
def rendered_jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    # An off-policy experiment: every role of POLICIES, the replay shards' Indexed Job included.
    spec = build_spec("exp1", flags={"algo": "sac", "env": "Pendulum-v1", "backend": "kube", "agents": 2})
    objects = render(spec, token="t")
    plan = translate(objects, workdir=Path(tmp_path_factory.mktemp("plan")))
    return {job.role: job for job in plan.jobs}


def containers_outcome(jobs: dict[str, object], role: str, history: list[int]) -> str:
    """What the containers Job controller makes of `history` on index 0 of the rendered Job."""
    job = jobs[role]
    controller = JobController((job,))  # type: ignore[arg-type]
    for code in history:
        d = controller.exited(job.name, "pod", 0, code)  # type: ignore[attr-defined]
        state = controller.state(job.name)  # type: ignore[attr-defined]
        if d.action is JobAction.REPLACE:
            continue
        if code == 0:
            return "done"
        return "failed" if state.condition == "Failed" or 0 in state.failed_indexes else "running"
    return "running"


HISTORIES = {
    "a crash, then success": [CRASH, 0],
    "crashes up to the budget, then success": [CRASH] * RETRIES + [0],
    "one crash past the budget": [CRASH] * (RETRIES + 1),
    "SIGKILLs past the budget": [KILLED] * (RETRIES + 1),
    "disruptions never count": [EXIT_PREEMPTED] * (3 * RETRIES) + [0],
    "disruptions between crashes": [CRASH, EXIT_PREEMPTED] * RETRIES + [CRASH],
    "its learner is gone": [CRASH, EXIT_LEARNER_GONE],
}


@pytest.mark.parametrize("role", ["learner", "actor", "replay", "evaluator"])
@pytest.mark.parametrize("history", list(HISTORIES), ids=list(HISTORIES))
def test_the_same_history_has_the_same_outcome_on_every_backend(rendered_jobs: dict, role: str,
                                                                 history: str) -> None:  # fmt: skip
    codes = HISTORIES[history]
    assert local_outcome(role, codes) == containers_outcome(rendered_jobs, role, codes)


def test_the_rendered_jobs_carry_the_policy(rendered_jobs: dict) -> None:
    """The Jobs' backoffLimit/backoffLimitPerIndex and podFailurePolicy, read back, are the policy."""
    assert sorted(rendered_jobs) == sorted(POLICIES)
    for role, policy in POLICIES.items():
        back = job_policy(rendered_jobs[role])
        assert (back.retries, back.per_index, back.fatal_exits, back.disruption_exits) == (
            policy.retries, policy.per_index, policy.fatal_exits, policy.disruption_exits)  # fmt: skip


def test_what_a_failed_role_means_for_the_experiment() -> None:
    assert role_failure("evaluator", ["evaluator"], 1, "exit code 1") is None  # never fatal
    assert role_failure("actor", ["actor-0"], 2, "exit code 1") is None  # actor-1 still feeds it
    assert role_failure("actor", ["actor-0", "actor-1"], 2, "exit code 1") == (
        "no actor is left to feed the learner: actor-0, actor-1 failed (exit code 1)")  # fmt: skip
    assert (
        role_failure("learner", ["learner"], 1, "killed by SIGKILL")
        == "the learner failed (killed by SIGKILL)"
    )


def _job(role: str, condition: str | None) -> dict:
    conditions = [{"type": condition, "status": "True"}] if condition else []
    return {"metadata": {"name": f"x-{role}", "labels": {"surreal.io/component": role}},
            "status": {"conditions": conditions}}  # fmt: skip


@pytest.mark.parametrize(
    ("ends", "jobs", "expected"),
    [
        ([RoleEnd("learner", done=True)], {"learner": "Complete"}, ("Succeeded", "")),
        ([RoleEnd("learner"), RoleEnd("evaluator", failed=("evaluator",), why="exit code 1")],
         {"learner": None, "evaluator": "Failed"}, (None, "")),
        ([RoleEnd("learner", failed=("learner",), why="exit code 70")], {"learner": "Failed"},
         ("Failed", "the learner failed (exit code 70)")),
        ([RoleEnd("learner"), RoleEnd("actor", 2, failed=("actor-0",), why="exit code 1")], None, (None, "")),
        ([RoleEnd("learner"), RoleEnd("actor", 2, failed=("actor-0", "actor-1"), why="exit code 1")],
         {"learner": None, "actor": "Failed"},
         ("Failed", "no actor is left to feed the learner: actor-0, actor-1 failed (exit code 1)")),
    ],
)  # fmt: skip
def test_one_outcome_of_the_roles_ends_for_every_backend(ends, jobs, expected) -> None:
    """policy.outcome decides the experiment's end from its roles': the local supervisor gives it
    its processes' states, the containers controller and `surreal status` on Kubernetes their
    Jobs' (kube.status.role_ends), so the same ends are the same phase on every backend."""
    phase, problem = outcome(ends)
    assert (phase, problem) == expected
    if jobs is not None:  # the same ends as Jobs (a Job is its role as one worker)
        from_jobs = kube_status.role_ends([_job(r, c) for r, c in jobs.items()], lambda role: problem)
        assert outcome(from_jobs)[0] == phase

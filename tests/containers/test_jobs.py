"""The containers backend's Job controller (containers_jobs): what batch/v1 does with an Indexed
Job's pods, decided from exit codes alone. Pure."""

from __future__ import annotations

from surreal.orchestrator.containers.jobs import JobController
from surreal.orchestrator.containers.jobs import PodAction as Action
from surreal.orchestrator.containers.plan import JobRun

LEARNER = JobRun("e-learner", "learner", 1, backoff_limit=2, backoff_per_index=None,
                 ignore_exit_codes=(143,), fail_exit_codes=())  # fmt: skip
ACTORS = JobRun("e-actor", "actor", 3, backoff_limit=None, backoff_per_index=1,
                ignore_exit_codes=(143,), fail_exit_codes=(69,))  # fmt: skip


def controller() -> JobController:
    return JobController((LEARNER, ACTORS))


def test_an_index_that_exits_0_is_done_and_the_job_completes_with_its_last_index() -> None:
    c = controller()
    assert c.exited("e-learner", "p", 0, 0).action is Action.NOTHING
    assert c.state("e-learner").condition == "Complete"
    for i in range(2):
        c.exited("e-actor", f"a{i}", i, 0)
    assert c.state("e-actor").condition == ""
    c.exited("e-actor", "a2", 2, 0)
    [learner, actors] = c.as_api({"e-actor": 0})
    assert actors["status"]["conditions"][0]["type"] == "Complete" and actors["status"]["succeeded"] == 3


def test_a_disruption_is_replaced_at_once_and_not_counted() -> None:
    c = controller()
    for _ in range(10):
        decision = c.exited("e-learner", "p", 0, 143)
        assert decision.action is Action.REPLACE and decision.delay == 0.0
    assert c.state("e-learner").failed == 0 and not c.state("e-learner").ended


def test_crashes_back_off_and_fail_the_job_past_its_limit() -> None:
    c = controller()
    first, second = c.exited("e-learner", "p1", 0, 1), c.exited("e-learner", "p2", 0, 137)
    assert (first.action, second.action) == (Action.REPLACE, Action.REPLACE)
    assert second.delay == 2 * first.delay > 0
    assert c.exited("e-learner", "p3", 0, 1).action is Action.FAIL_JOB  # the third: over backoffLimit 2
    s = c.state("e-learner")
    assert (s.condition, s.reason, s.failed) == ("Failed", "BackoffLimitExceeded", 3)


def test_one_actor_index_spends_its_own_retries_and_fails_no_other() -> None:
    c = controller()
    assert c.exited("e-actor", "a", 1, 1).action is Action.REPLACE
    assert c.exited("e-actor", "b", 1, 1).action is Action.NOTHING  # index 1 failed for good
    assert not c.state("e-actor").ended  # the others go on
    c.exited("e-actor", "c", 0, 0)
    c.exited("e-actor", "d", 2, 0)
    s = c.state("e-actor")
    assert (s.condition, s.reason) == ("Failed", "FailedIndexes")


def test_a_worker_whose_learner_is_gone_fails_its_job_at_once() -> None:
    c = controller()
    assert c.exited("e-actor", "a-0-x", 0, 69).action is Action.FAIL_JOB
    s = c.state("e-actor")
    assert s.reason == "PodFailurePolicy" and "exit code 69" in s.message


def test_scale_adds_and_drops_indexes_and_the_state_survives_the_record() -> None:
    c = controller()
    c.exited("e-actor", "a", 0, 0)
    c.scale("e-actor", 1)
    assert c.state("e-actor").condition == "Complete"  # index 0 was all that was left
    c = controller()
    c.exited("e-actor", "a", 2, 1)
    c.scale("e-actor", 5)
    again = JobController((LEARNER, ACTORS), c.to_list())
    assert again.state("e-actor").completions == 5 and again.state("e-actor").failed_by_index == {2: 1}
    assert again.exited("e-actor", "b", 4, 0).action is Action.NOTHING
    assert again.exited("e-actor", "z", 7, 1).action is Action.NOTHING  # an index no longer wanted
    again.scale("e-actor", 2)
    again.scale("e-actor", 5)  # index 2 comes back without the failures of the one dropped
    assert again.state("e-actor").failed_by_index == {}

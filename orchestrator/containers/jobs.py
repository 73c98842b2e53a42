"""The Job controller of the containers backend: what Kubernetes does with a Job's pods, for pods
that are containers. Pure: it is told which pod ended with which exit code and says what to do.

As batch/v1 does for an Indexed Job with `restartPolicy: Never`: a pod that exits 0 completes its
index and the Job completes once every index has; what follows a failed pod is policy.py's
`decide` on the failure policy the Job carries (the kubelet's backoff is longer: 10 s doubling to
5 minutes). `completions` follows `scale` (an elastic Indexed Job).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from surreal.orchestrator.containers.plan import JobRun
from surreal.orchestrator.policy import Action, RolePolicy, decide


class PodAction(StrEnum):
    NOTHING = "nothing"  # the index is done, or no longer wanted, or already failed
    REPLACE = "replace"  # start a new pod for the index (after `delay`)
    FAIL_JOB = "fail_job"  # stop the Job's other pods: it has failed


@dataclass(frozen=True)
class PodDecision:
    action: PodAction
    delay: float = 0.0


@dataclass
class JobState:
    job: JobRun
    completions: int
    succeeded: set[int] = field(default_factory=set)
    failed: int = 0  # pods whose failure counted
    failed_by_index: dict[int, int] = field(default_factory=dict)
    failed_indexes: set[int] = field(default_factory=set)
    condition: str = ""  # "", "Complete" or "Failed"
    reason: str = ""
    message: str = ""

    @property
    def ended(self) -> bool:
        return bool(self.condition)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["job"] = self.job.name
        data["succeeded"], data["failed_indexes"] = sorted(self.succeeded), sorted(self.failed_indexes)
        return data


def job_policy(job: JobRun) -> RolePolicy:
    """The failure policy a rendered Job carries (kube.render.job_failure_policy's fields, read
    back by the translation): the same data, so the same `decide` as the local supervisor's."""
    per_index = job.backoff_per_index is not None
    retries = job.backoff_per_index if job.backoff_per_index is not None else job.backoff_limit
    return RolePolicy(
        retries=int(retries or 0),
        per_index=per_index,
        fatal_exits=tuple(job.fail_exit_codes),
        disruption_exits=tuple(job.ignore_exit_codes),
        fails_experiment=True,
    )


class JobController:
    def __init__(self, jobs: tuple[JobRun, ...], saved: list[dict[str, Any]] | None = None) -> None:
        self.jobs = {j.name: JobState(j, j.completions) for j in jobs}
        for data in saved or []:
            state = self.jobs.get(str(data["job"]))
            if state is not None:
                state.completions = int(data["completions"])
                state.succeeded, state.failed_indexes = set(data["succeeded"]), set(data["failed_indexes"])
                state.failed = int(data["failed"])
                state.failed_by_index = {int(k): int(v) for k, v in data["failed_by_index"].items()}
                for key in ("condition", "reason", "message"):
                    setattr(state, key, str(data[key]))

    def to_list(self) -> list[dict[str, Any]]:
        return [s.to_dict() for s in self.jobs.values()]

    def state(self, job: str) -> JobState:
        return self.jobs[job]

    def exited(self, job: str, pod: str, index: int, code: int) -> PodDecision:
        """Pod `pod` of index `index` of Job `job` exited with `code` (128 + N: killed by signal N)."""
        s = self.jobs[job]
        if s.ended or index >= s.completions or index in s.succeeded:
            return PodDecision(PodAction.NOTHING)
        if code == 0:
            s.succeeded.add(index)
            self._maybe_ended(s)
            return PodDecision(PodAction.NOTHING)
        policy = job_policy(s.job)
        counted_before = s.failed_by_index.get(index, 0) if policy.per_index else s.failed
        decision = decide(policy, code, counted_before)
        if decision.action is Action.FAIL_ROLE:
            self._fail(s, "PodFailurePolicy", f"Container {s.job.role} for pod {pod} failed with exit "
                       f"code {code} matching FailJob rule")  # fmt: skip
            return PodDecision(PodAction.FAIL_JOB)
        if decision.counted:
            s.failed += 1
            s.failed_by_index[index] = s.failed_by_index.get(index, 0) + 1
        if decision.action is Action.REPLACE:
            return PodDecision(PodAction.REPLACE, decision.delay)
        if policy.per_index:  # this index has failed; the Job once every index has ended
            s.failed_indexes.add(index)
            self._maybe_ended(s)
            return PodDecision(PodAction.NOTHING)
        self._fail(s, "BackoffLimitExceeded", "Job has reached the specified backoff limit")
        return PodDecision(PodAction.FAIL_JOB)

    def scale(self, job: str, completions: int) -> None:
        """completions = parallelism = `completions` (indexes beyond it are dropped)."""
        s = self.jobs[job]
        s.completions = completions
        s.succeeded = {i for i in s.succeeded if i < completions}
        s.failed_indexes = {i for i in s.failed_indexes if i < completions}
        s.failed_by_index = {i: n for i, n in s.failed_by_index.items() if i < completions}
        self._maybe_ended(s)

    def _maybe_ended(self, s: JobState) -> None:
        if s.ended or len(s.succeeded) + len(s.failed_indexes) < s.completions:
            return
        if s.failed_indexes:
            self._fail(s, "FailedIndexes", f"Job has failed indexes {sorted(s.failed_indexes)}")
        else:
            s.condition = "Complete"

    @staticmethod
    def _fail(s: JobState, reason: str, message: str) -> None:
        s.condition, s.reason, s.message = "Failed", reason, message

    def as_api(self, active: dict[str, int]) -> list[dict[str, Any]]:
        """The Jobs as the API shows them (what kube_status reads): `active` pods per Job."""
        out = []
        for name, s in self.jobs.items():
            conditions = []
            if s.condition:
                conditions.append({"type": s.condition, "status": "True", "reason": s.reason,
                                   "message": s.message})  # fmt: skip
            out.append({
                "metadata": {"name": name, "labels": {"surreal.io/component": s.job.role}},
                "spec": {"completions": s.completions, "parallelism": s.completions},
                "status": {"active": active.get(name, 0), "succeeded": len(s.succeeded),
                           "failed": s.failed, "conditions": conditions},
            })  # fmt: skip
        return out

"""The failure policy, written once as data of the program: what an exit of each role means.

One pure function, `decide`, says what follows one exit; the local supervisor, the containers
Job controller and a learner's agent of ranks (rank_agent.py, `LEARNER_GROUP`) call it, and the kube
renderer turns the same data into each Job's `backoffLimit` (or `backoffLimitPerIndex`) and
`podFailurePolicy`. So a crash has the same outcome on every backend: exit 0 is done; a disruption
is replaced at once, uncounted; a fatal exit fails the role at once; any other exit counts, and is
replaced after a backoff until more than `retries` have counted.

What the roles' ends mean for the experiment is `outcome`, the one rule every backend applies to
what it sees (processes, containers, Jobs): a failed role fails it as `role_failure` says (the
evaluator's never does: the learner evaluates its final version itself); otherwise it has
succeeded once the learner is done.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from surreal.orchestrator.program import ACTOR_ROLE, EVALUATOR_ROLE, LEARNER_ROLE, REPLAY_ROLE
from surreal.orchestrator.status import Phase
from surreal.runtime.exits import (
    EXIT_ALGORITHM_FAILED,
    EXIT_COLLECTIVE_FAILED,
    EXIT_ENV_FAILED,
    EXIT_GROUP_NOT_FORMED,
    EXIT_LEARNER_GONE,
    EXIT_NO_ACTORS,
    EXIT_NOT_TRAINED,
    EXIT_PREEMPTED,
)


@dataclass(frozen=True)
class RolePolicy:
    retries: int
    """Exits that count, beyond which the role has failed: per worker index when `per_index` (one
    crashing actor fails no other), for the whole role otherwise. Kubernetes: backoffLimit, or
    backoffLimitPerIndex."""
    per_index: bool = False
    """Each worker index has its own budget, and the role has failed once every index has."""
    fatal_exits: tuple[int, ...] = ()
    """Exits that fail the role at once, uncounted and not retried (podFailurePolicy FailJob)."""
    disruption_exits: tuple[int, ...] = (EXIT_PREEMPTED,)
    """Exits that are not failures: replaced at once, not counted (podFailurePolicy Ignore)."""
    fails_experiment: bool = True
    """Whether the role's failure fails the experiment."""
    backoff_seconds: float = 0.5
    """The wait before the first replacement of a counted exit; it doubles with each one."""
    max_backoff_seconds: float = 10.0
    """The longest wait before a replacement (Kubernetes: its kubelet's own backoff)."""


class Action(StrEnum):
    DONE = "done"  # exited 0: the index (or the role) completed
    REPLACE = "replace"  # start it again after `delay`
    GIVE_UP = "give_up"  # past its budget: the index (or the role) has failed
    FAIL_ROLE = "fail_role"  # a fatal exit: the whole role has failed at once


@dataclass(frozen=True)
class Decision:
    action: Action
    delay: float = 0.0
    counted: bool = False  # the exit counted against the budget


def decide(policy: RolePolicy, code: int, counted_before: int) -> Decision:
    """What follows an exit with `code` of a role (or index) that had `counted_before` counted
    exits (128 + N or -N: killed by signal N, which counts as any crash)."""
    if code == 0:
        return Decision(Action.DONE)
    if code in policy.fatal_exits:
        return Decision(Action.FAIL_ROLE)
    if code in policy.disruption_exits:
        return Decision(Action.REPLACE)
    if counted_before >= policy.retries:
        return Decision(Action.GIVE_UP, counted=True)
    delay = min(policy.backoff_seconds * 2**counted_before, policy.max_backoff_seconds)
    return Decision(Action.REPLACE, delay, counted=True)


RETRIES = 5  # counted exits a role (an actor index) survives: the sixth fails it
POLICIES: Mapping[str, RolePolicy] = {
    LEARNER_ROLE: RolePolicy(
        retries=RETRIES,
        fatal_exits=(
            EXIT_GROUP_NOT_FORMED,
            EXIT_NO_ACTORS,
            EXIT_ENV_FAILED,
            EXIT_NOT_TRAINED,
            EXIT_ALGORITHM_FAILED,
        ),
    ),
    ACTOR_ROLE: RolePolicy(
        retries=RETRIES,
        per_index=True,
        fatal_exits=(EXIT_LEARNER_GONE, EXIT_ENV_FAILED, EXIT_ALGORITHM_FAILED),
    ),
    # A shard is one index of its Indexed Job: a crash of one (its rows lost) fails no other.
    REPLAY_ROLE: RolePolicy(
        retries=RETRIES, per_index=True, fatal_exits=(EXIT_ENV_FAILED, EXIT_ALGORITHM_FAILED)
    ),
    EVALUATOR_ROLE: RolePolicy(
        retries=RETRIES,
        fatal_exits=(EXIT_LEARNER_GONE, EXIT_ENV_FAILED, EXIT_ALGORITHM_FAILED),
        fails_experiment=False,
    ),
}


# A learner's group of ranks inside its process or pod (ranks.launch_ranks): started again at once
# when a rank fails, three times; a group that ended because a peer pod's rank went away
# (EXIT_COLLECTIVE_FAILED on every rank of this pod that failed) is disrupted, not failed. A group
# that did not form fails the learner (GroupNotFormed, its fatal exit above).
LEARNER_GROUP = RolePolicy(retries=3, disruption_exits=(EXIT_COLLECTIVE_FAILED,), backoff_seconds=0.0,
                           max_backoff_seconds=0.0)  # fmt: skip


def policy_of(role: str) -> RolePolicy:
    """The policy of `role`; a role the program does not know (a test's) is treated as a learner's
    peer: retried, and its failure fails the experiment."""
    return POLICIES.get(role, RolePolicy(retries=RETRIES))


def role_failure(role: str, failed: list[str], indexes: int, why: str) -> str | None:
    """Why the experiment fails now that `failed` (names) of `role`'s `indexes` workers have failed
    (`why`: how), or None while it goes on."""
    policy = policy_of(role)
    if not failed or not policy.fails_experiment:
        return None
    if policy.per_index and len(failed) < indexes:
        return None
    if role == ACTOR_ROLE:
        return f"no actor is left to feed the learner: {', '.join(failed)} failed ({why})"
    return f"the {role} failed ({why})"


def unfinished(final: Mapping[str, Any] | None) -> str | None:
    """Why a learner that exited 0 has not succeeded: its last status (`final`) does not say its run
    is done (its steps, an update applied, the final evaluation: serving.finish fails a run that
    did not train before it writes that), as when the algorithm's code ended the process itself.
    None when it does, or when nothing is known."""
    if final is None or final.get("done"):
        return None
    counts = (f" ({final.get('env_steps') or 0:,} env steps, {final.get('updates') or 0:,} updates applied)"
              if "env_steps" in final else "")  # fmt: skip
    return (f"the learner exited 0 before its run was done{counts}: something in its process ended it "
            "early (the algorithm's code?)")  # fmt: skip


@dataclass(frozen=True)
class RoleEnd:
    """What a backend knows of one role's ending, for `outcome`."""

    role: str
    workers: int = 1  # its workers (actor indexes; 1 for a role a backend sees as one, a Job)
    done: bool = False  # it completed (the learner: exited 0, its Job Complete)
    failed: tuple[str, ...] = ()  # those of its workers that have failed for good
    why: str = ""  # how they failed


def outcome(roles: Iterable[RoleEnd], over: bool = False) -> tuple[Phase | None, str]:
    """The experiment's phase once it is decided, and why it failed: Failed once a role whose
    failure fails the experiment has failed (role_failure); else Succeeded once the learner is
    done; else (None, ""): it goes on, unless it is `over` (every component has ended): then it
    has succeeded if every role is done (a program without a learner), and failed otherwise."""
    roles = list(roles)
    for end in roles:
        if problem := role_failure(end.role, list(end.failed), end.workers, end.why):
            return Phase.FAILED, problem
    if any(end.role == LEARNER_ROLE and end.done for end in roles) or (over and all(e.done for e in roles)):
        return Phase.SUCCEEDED, ""
    return (Phase.FAILED, "every component ended before the learner was done") if over else (None, "")

"""`surreal scale`'s two rules, each written once for every backend.

In place (`scale_in_place`), for an experiment not admitted as one unit: its learner pods are kept;
the count is checked against the experiment's split into workers before anything changes; the
learner takes the new count first (it then accepts the new actors' streams and counts no dropped
actor as lost), and only then are actors started or stopped. Each backend says how a step is done
(`InPlace`): local/launcher.py, containers/launcher.py, kube/client.py.

Resizing an experiment admitted as one unit (`--queue`, `resize`): a Job's size cannot change while
it exists (even suspended), and a queue admits a size, so the experiment is suspended, made again at
the new size and admitted again:

1. `begin`: say it (status: "Suspended for resize to N agents") and keep what is to be made, before
   anything changes, so that `surreal scale` again finishes a resize that was cut short;
2. `suspend`: the experiment's pods get SIGTERM; the learner saves its checkpoint (a clean one:
   the version it has) and leaves;
3. wait until no learner pod is left: nothing is removed while a learner may still be saving, and
   a learner that does not leave within `stop_seconds` stops the resize with nothing removed;
4. `remake`: the suspended experiment is removed and made again at the new size, for its queue to
   admit; the learner resumes from its checkpoint (0 updates lost);
5. `end`: the mark is taken away.

Kubernetes (kube/client.py: a JobSet, Kueue's Workload) and the containers backend (its own
stand-in for a queue, containers/launcher.py) each say how a step is done, not which steps or in
which order.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from surreal.orchestrator.launcher import LauncherError, UsageError, wait_until

# How long a resize waits for the learner pods to save and go once suspended: the learner's grace
# period (kube.render.LEARNER_GRACE_SECONDS, 30 s) three times over, for Kueue's, JobSet's and the
# kubelet's reactions.
STOP_SECONDS = 90.0


class Suspendable(Protocol):
    """A backend's steps of the resize of one experiment (the module's docstring)."""

    name: str

    def begin(self) -> bool:
        """Mark the resize and keep what is to be made; True while the experiment's current unit
        still exists (to suspend), False when an earlier try already removed it."""

    def suspend(self) -> None: ...

    def learner_pods(self) -> list[str]:
        """The learner pods still there (running or stopping)."""

    def remake(self) -> None: ...

    def end(self) -> None: ...


def resize(
    target: Suspendable,
    *,
    stop_seconds: float = STOP_SECONDS,
    poll_seconds: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    error: type[LauncherError] = LauncherError,
) -> None:
    """Suspend `target`, wait for its learner pods to leave, make it again at its new size."""
    if target.begin():
        target.suspend()
        deadline = clock() + stop_seconds
        while learners := target.learner_pods():
            if clock() > deadline:
                raise error(
                    f"experiment {target.name!r} is suspended for a resize, but its learner pod "
                    f"{learners[0]} is still there after {stop_seconds:.0f} s; `surreal scale` again "
                    "finishes the resize once it is gone (nothing is lost meanwhile)"
                )
            sleep(poll_seconds)
    target.remake()
    target.end()


class InPlace(Protocol):
    """A backend's steps of scaling one running experiment's actors in place."""

    name: str
    learner_pods: int  # what it runs, and keeps

    def problem(self, agents: int) -> str | None:
        """Why the experiment cannot run `agents` (its split into workers), or None."""

    def not_running(self) -> str | None:
        """Why the experiment has nothing to scale (it has ended), or None while it runs."""

    def tell_learner(self, agents: int) -> None: ...

    def learner_took(self, agents: int) -> bool:
        """True once the learner runs with `agents` (or the run has ended)."""

    def resize_actors(self, agents: int) -> str:
        """Start or stop actors; returns what now runs them ("3 actor pods")."""

    def actors_run(self, agents: int) -> bool:
        """True once the actors run as `agents` (or the run has ended)."""


def scale_in_place(target: InPlace, agents: int, learner_pods: int | None, timeout: float = 60.0) -> str:
    """Scale `target`'s actors to `agents` by the in-place rule (the module's docstring); returns the
    line to show. Another count of learner pods, or a count its workers cannot take, is refused
    (UsageError), and an experiment that has ended (LauncherError), before anything changes."""
    name = target.name
    if learner_pods is not None and learner_pods != target.learner_pods:
        raise UsageError(
            f"experiment {name!r} runs {target.learner_pods} learner pod(s) and scales its actors in "
            "place; --learner-pods resizes only an experiment admitted as one unit (created with "
            "--queue), which is suspended, made again and resumed from its checkpoint"
        )
    if (problem := target.problem(agents)) is not None:
        raise UsageError(f"experiment {name!r}: {problem}")
    if (ended := target.not_running()) is not None:
        raise LauncherError(f"experiment {name!r} {ended}; nothing to scale")
    target.tell_learner(agents)
    wait_until(f"the learner of {name!r} to take {agents} agents", lambda: target.learner_took(agents),
               timeout)  # fmt: skip
    units = target.resize_actors(agents)
    wait_until(f"the actors of {name!r} to run as {agents} agents", lambda: target.actors_run(agents),
               timeout)  # fmt: skip
    return f"experiment {name!r}: {agents} agents in {units}"


def pods_problem(agents: int, per_pod: int) -> str | None:
    """A count that does not fill whole pods of `per_pod` agents."""
    if agents < 1 or agents % per_pod:
        return f"--agents must be a positive multiple of agents_per_pod ({per_pod}), got {agents}"
    return None

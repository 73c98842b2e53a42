"""Resizing an experiment admitted as one unit (`--queue`): the rule every backend follows, written
once. A Job's size cannot change while it exists (even suspended), and a queue admits a size, so
the experiment is suspended, made again at the new size and admitted again:

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

from surreal.orchestrator.launcher import LauncherError, UsageError

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


def check_in_place(name: str, learner_pods: int | None, current: int) -> None:
    """An experiment not admitted as one unit scales its actors in place, its learner untouched:
    another count of learner pods is refused (UsageError), before anything changes."""
    if learner_pods is not None and learner_pods != current:
        raise UsageError(
            f"experiment {name!r} runs {current} learner pod(s) and scales its actors in place; "
            "--learner-pods resizes only an experiment admitted as one unit (created with --queue), "
            "which is suspended, made again and resumed from its checkpoint"
        )

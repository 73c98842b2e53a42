"""A learner that makes no progress ends, and says why: no env step counted, or no update applied,
for `progress_deadline_seconds` while it trains (an environment whose every fragment is refused, an
update that never returns, every update skipped). Its watch is a thread, so an update that hangs
the main thread is caught too: the learner is asked to stop as on SIGTERM (it saves and leaves with
EXIT_NOT_TRAINED, a fatal exit of its role, and the reason as its termination message); if its main
thread has not left FORCE_SECONDS later (at most the deadline), the process exits so itself."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from surreal.runtime import preemption
from surreal.runtime.exits import EXIT_NOT_TRAINED
from surreal.runtime.run import RoleFailed

log = logging.getLogger(__name__)

DEFAULT_SECONDS = 600.0  # long enough for actor pods to wait for a node and pull their image
FORCE_SECONDS = 30.0  # from the stop's request to a forced exit, if the main thread is stuck
POLL_SECONDS = 1.0


@dataclass
class Progress:
    """When the learner's env steps and applied updates last moved (monotonic seconds)."""

    deadline: float
    env_steps: int = -1
    updates: int = -1
    steps_at: float = 0.0
    updates_at: float = 0.0

    def note(self, env_steps: int, updates: int, now: float) -> None:
        if env_steps != self.env_steps:
            self.env_steps, self.steps_at = env_steps, now
        if updates != self.updates:
            self.updates, self.updates_at = updates, now

    def problem(self, now: float) -> str | None:
        """Why the run has stalled, or None."""
        why = f"(progress_deadline_seconds={self.deadline:g}; {self.env_steps:,} env steps, {self.updates:,} "
        why += "updates)"
        steps, updates = now - self.steps_at > self.deadline, now - self.updates_at > self.deadline
        if steps and updates:
            return (f"no env step was counted and no update applied for {now - self.updates_at:.0f} s {why}: "
                    "are the actors' fragments refused, or does an update never return?")  # fmt: skip
        if steps:
            return (
                f"no env step was counted for {now - self.steps_at:.0f} s {why}: are the fragments refused?"
            )
        if updates:
            stalled = now - self.updates_at
            return f"no update was applied for {stalled:.0f} s {why}: is every update skipped, or one stuck?"
        return None


def watch(
    deadline: float, counts: Callable[[], tuple[int, int]], stopped: threading.Event
) -> threading.Thread:
    """Start the watch of a training learner whose (env steps, updates applied) `counts` gives, until
    `stopped` is set (training ended)."""
    progress = Progress(deadline)

    def run() -> None:
        progress.note(*counts(), time.monotonic())
        while not stopped.wait(POLL_SECONDS):
            progress.note(*counts(), time.monotonic())
            problem = progress.problem(time.monotonic())
            if problem is None:
                continue
            log.error("the run makes no progress: %s", problem)
            failure = RoleFailed(EXIT_NOT_TRAINED, f"the run makes no progress: {problem}")
            preemption.stop_for(failure)
            grace = min(FORCE_SECONDS, deadline)
            if not stopped.wait(grace):
                log.error("the learner did not stop within %.0f s of the request (is it stuck in the "
                          "algorithm's code?): exiting %d", grace, EXIT_NOT_TRAINED)  # fmt: skip
                preemption.force_exit(failure)
            return

    thread = threading.Thread(target=run, name="surreal-progress-deadline", daemon=True)
    thread.start()
    return thread

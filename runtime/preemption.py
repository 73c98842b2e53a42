"""A learner that is told to stop (SIGTERM: a preempted node, a drain, `kubectl delete pod`, the
local supervisor) writes a checkpoint of the version it has before it exits.

The component entry point routes SIGTERM here. While a learner trains (`graceful()`), the signal
only sets a flag: the learner finishes the update it is in, saves, and exits EXIT_PREEMPTED, which
the Job's podFailurePolicy and the local supervisor take as "restart me, not a failure". Outside
`graceful()` (a worker, or a learner before or after training) the signal exits at once, as it
always did.

`stop_for(failure)` asks the same of a learner from inside (a thread of its component: on
Kubernetes the cluster watch that saw the actors' Job fail): the learner saves and leaves as on
SIGTERM, and the component then exits with `failure`'s fatal code and reason instead of
EXIT_PREEMPTED (`failure()`). Before training it is honoured at the first look; once the run is
done it changes nothing (the run ends as it would have).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn

from surreal.runtime.exits import EXIT_PREEMPTED
from surreal.runtime.run import RoleFailed

_requested = threading.Event()
_graceful = threading.Event()
_failure: list[RoleFailed] = []  # what stop_for was told (the first)
_last_words: list[Callable[[RoleFailed], None]] = []  # how the component leaves its reason (force_exit)


def on_force_exit(last_words: Callable[[RoleFailed], None]) -> None:
    """How the component leaves a failure's reason (its termination message) when `force_exit` ends it."""
    _last_words[:] = [last_words]


def force_exit(failure: RoleFailed) -> NoReturn:
    """Exit now with `failure.code`, whatever the main thread is stuck in, its reason left first."""
    for last_words in _last_words:
        with contextlib.suppress(Exception):
            last_words(failure)
    logging.shutdown()
    os._exit(failure.code)


def on_sigterm(*_: object) -> None:
    """The SIGTERM handler of every component (installed by surreal.component)."""
    _requested.set()
    if not _graceful.is_set():
        sys.exit(EXIT_PREEMPTED)


def requested() -> bool:
    """A stop was asked for: save and leave."""
    return _requested.is_set()


@contextmanager
def graceful() -> Iterator[None]:
    """Within: SIGTERM sets the flag and nothing else. A signal that came before is honoured at
    once by the caller's first look at `requested()`."""
    _graceful.set()
    try:
        yield
    finally:
        _graceful.clear()


def stop_for(failure: RoleFailed) -> None:
    """Stop as on SIGTERM (save, leave), because the role has failed for good: `failure`. Any
    thread; no signal is sent (a learner's ranks get one from their agent: ranks.launch_ranks)."""
    if not _failure:
        _failure.append(failure)
    _requested.set()


def failure() -> RoleFailed | None:
    """Why `stop_for` was asked to stop, or None."""
    return _failure[0] if _failure else None


def wait_requested(timeout: float) -> bool:
    """Wait up to `timeout` seconds for a stop request; whether there is one."""
    return _requested.wait(timeout)

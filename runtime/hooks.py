"""An algorithm's code, called by the runtime: whatever a hook raises (or a SystemExit it calls)
fails its role at once (EXIT_ALGORITHM_FAILED, a fatal exit of every role) with one line that names
the algorithm, the hook and the exception; the traceback stays in the component's log. Retrying
would run the same code on the same data again, so it never retries."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from surreal.runtime.envs.ref import ours, raised
from surreal.runtime.exits import EXIT_ALGORITHM_FAILED
from surreal.runtime.run import CollectiveFailed, PeerLost, RoleFailed

log = logging.getLogger(__name__)
T = TypeVar("T")

# What the runtime itself raises through a hook (a learner rank's collective inside `update`): not
# the algorithm's fault.
RUNTIME_ERRORS = (PeerLost, CollectiveFailed, RoleFailed)


def algorithm_name(algo: Any) -> str:
    """How errors name an algorithm: MODULE:NAME for a researcher's own, its name for surreal's."""
    cls = type(algo)
    if cls.__module__.startswith("surreal."):
        return repr(getattr(algo, "name", cls.__name__))
    return f"{cls.__module__}:{cls.__qualname__}"


def failed(algo: Any, hook: str, problem: str) -> RoleFailed:
    """The role's fatal failure: `algo`'s `hook` did `problem` (e.g. "returned None")."""
    return RoleFailed(EXIT_ALGORITHM_FAILED, f"algorithm {algorithm_name(algo)}: its {hook} {problem}")


def call(algo: Any, hook: str, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)`, the algorithm's `hook`; what it raises fails the role (see the module's doc)."""
    try:
        return fn(*args)
    except BaseException as exc:
        if ours(exc) or isinstance(exc, RUNTIME_ERRORS):
            raise
        log.error("algorithm %s: its %s raised", algorithm_name(algo), hook, exc_info=exc)
        raise failed(algo, hook, f"raised {raised(exc)}") from exc


def statistics(algo: Any, hook: str, stats: Any) -> dict[str, Any]:
    """`stats` as a hook must return them: a mapping of names to numbers or one-element tensors."""
    if not isinstance(stats, dict) or not all(isinstance(k, str) for k in stats):
        raise failed(
            algo, hook, f"returned {type(stats).__name__}, not a dict of statistics (name -> number)"
        )
    for name, value in stats.items():
        size = getattr(value, "numel", None)
        if isinstance(value, bool) or not (
            isinstance(value, int | float) or (callable(size) and size() == 1)
        ):
            raise failed(algo, hook, f"returned statistic {name!r} as {_kind(value)}: a number or a "
                         "one-element tensor is expected")  # fmt: skip
    return stats


def _kind(value: Any) -> str:
    shape = getattr(value, "shape", None)
    return (
        f"a {type(value).__name__} of shape {tuple(shape)}"
        if shape is not None
        else f"a {type(value).__name__}"
    )

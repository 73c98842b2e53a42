"""The status contract: what `surreal status NAME -o json` holds, the same on every backend.

One object per experiment: its identity, `phase`, the learner's metrics, one row per component
(its state one of `ComponentState` whatever runs it) and what the backend knows besides.
docs/getting-started.md#status-reference lists every field, and a test holds it to this module.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any


class Phase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    STOPPED = "Stopped"


TERMINAL_PHASES = frozenset({Phase.SUCCEEDED, Phase.FAILED, Phase.STOPPED})


class ComponentState(StrEnum):
    PENDING = "Pending"  # not started yet (scheduling, pulling its image, waiting for admission)
    STARTING = "Starting"  # started, not ready yet
    RUNNING = "Running"
    RESTARTING = "Restarting"  # ended and waiting to be started again (a backoff)
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    STOPPED = "Stopped"  # ended by a stop: delete, Ctrl-C, a preemption's clean exit


ENDED_STATES = frozenset({ComponentState.SUCCEEDED, ComponentState.FAILED, ComponentState.STOPPED})

# What a command that waited for the end exits with: Ctrl-C's 130 for Stopped, 1 for Failed (or a
# phase nobody knows), 0 for Succeeded and while the experiment runs on (create --detach).
_EXIT_CODES: dict[str, int] = {Phase.PENDING: 0, Phase.RUNNING: 0, Phase.SUCCEEDED: 0, Phase.STOPPED: 130}


def exit_code(phase: str | None) -> int:
    """The exit code of a command that waited for an experiment whose phase is `phase`."""
    return 0 if phase is None else _EXIT_CODES.get(phase, 1)  # a Phase is its str


METRIC_FIELDS = (
    "env_steps", "updates", "policy_version", "episodes", "train_return", "eval_return",
    "best_eval_return", "eval_stderr", "eval_episodes", "steps_per_second", "elapsed_seconds",
)  # fmt: skip


# Passed through when the learner reports them: what it dropped or refused, and why; then the ES
# master's only: logical agents whose results arrived, the result ledger, how many versions old
# the results of recent updates were, rounds updated without all their pairs, and the hand-out
# sizes for the agent count; then an off-policy learner's replay (its size, rates, the ratio held,
# each shard's counters and what was lost) and the rows it trained on.
EXTRA_METRICS = (
    "dropped_fragments", "connected_actors", "rejected_fragments", "skipped_updates",
    "wire_rejections", "checkpoint_version", "checkpoint_age_seconds", "learners", "group_restarts",
    "waiting_for",
    "agents_reporting", "results_accepted", "results_rejected", "staleness", "short_rounds",
    "pairs_per_update", "round_pairs", "pairs_per_agent", "max_staleness", "step_size",
    "replay", "rows_trained", "update_share", "actor_wait_share", "balance",
)  # fmt: skip

IDENTITY_FIELDS = ("name", "algo", "env", "backend", "agents", "target_steps")
COMPONENT_FIELDS = ("name", "role", "state", "restarts", "detail")


def component(
    name: str, role: str, state: ComponentState | str, restarts: int, detail: str = ""
) -> dict[str, Any]:
    """One row of `components`; `state` must be a ComponentState."""
    return {"name": name, "role": role, "state": ComponentState(state).value, "restarts": int(restarts),
            "detail": detail}  # fmt: skip


def status_object(
    spec: Mapping[str, Any],
    *,
    backend: str,
    phase: Phase | str,
    metrics: Mapping[str, Any],
    components: Sequence[Mapping[str, Any]],
    agents: Any = None,
    **extra: Any,
) -> dict[str, Any]:
    """The contract's object: identity from the spec file's mapping, `phase`, the learner's
    metrics, the component rows, then what the backend adds (`extra`, None values left out)."""
    out: dict[str, Any] = {
        "name": spec.get("name"),
        "algo": spec.get("algo"),
        "env": spec.get("env"),
        "backend": backend,
        "agents": metrics.get("agents") or agents or spec.get("agents"),  # the learner follows scale
        "target_steps": spec.get("steps"),
        "phase": Phase(phase).value,
    }
    for key in METRIC_FIELDS:
        out[key] = metrics.get(key)
    for key in EXTRA_METRICS:
        if key in metrics:
            out[key] = metrics[key]
    sizing = spec.get("sizing")  # how the agents were packed, and why (sizing.py)
    if isinstance(sizing, Mapping) and sizing.get("why"):
        out["sizing"] = sizing["why"]
    out["components"] = [dict(c) for c in components]
    out.update({k: v for k, v in extra.items() if v is not None})
    return out


def describe_exit(code: int) -> str:
    """How a process ended, in the words of every backend: 'exit code 3', or 'killed by SIGKILL'
    for a Popen-style return code (negative: the signal)."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def describe_container_exit(code: int) -> str:
    """describe_exit for a container's exit code, where 128 + N means signal N (137: SIGKILL)."""
    if 128 < code < 128 + signal.NSIG:
        return describe_exit(128 - code)
    return describe_exit(code)

"""Every setting's bounds, from what a process or pod can hold and finish, checked in one place.

An algorithm's config lists its numeric settings with their ranges (`Bounds`); `check` applies
them. The config's `validate` calls it, and `validate` runs at `surreal create` (build_spec), in
every component as it loads its spec (so a Helm release's values are checked as the CLI's are),
and at `surreal scale` through the spec; so a value is refused once, in one line, before anything
is made. The limits that follow from resources rather than from meaning are named here:
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

# One worker process steps its environments one after another on one core (EnvBatch), and the
# evaluator steps one environment per episode: past a few thousand a single step of the batch takes
# seconds even for a cheap environment, and a fragment or an evaluation takes hours.
MAX_WORKER_ENVS = 4096
# Episodes per evaluation: the standard error of a mean return over 1,000 episodes is 3 % of its
# spread, finer than any decision a run makes on it; more only delays the run's end.
MAX_EVAL_EPISODES = 1000
# What a learner rank is given (its pod's memory request, one local process's share): its
# network, gradients and optimizer state, its batch and the serving loop's buffers fit in it.
LEARNER_MEMORY_MB = 2048
# A network's weights, gradients and Adam's two moments, float32: what a parameter costs a learner.
BYTES_PER_PARAMETER = 16
MAX_WIDTH, MAX_LAYERS = 65_536, 64  # hidden layers of an MLP
WEEK = 604_800.0  # the longest any wait of a component may be set to
OPEN = 1e-9  # a low bound below this (and above 0) stands for "> 0"
UNBOUNDED = 1e12  # a high bound from this up stands for none: any finite value is valid

Bounds = Mapping[str, tuple[float, float]]
"""Setting -> (low, high), both included; an int low makes the setting an integer."""


def check(prefix: str, config: Any, bounds: Bounds) -> None:
    """Raise ValueError naming the first setting of `config` outside its bounds (or not an
    integer where the low bound is one)."""
    for name, (low, high) in bounds.items():
        value = getattr(config, name)
        if value is None:  # an optional setting left unset
            continue
        whole = isinstance(low, int)
        if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)):
            kind = "an integer" if whole else "a number"
            raise ValueError(f"{prefix}.{name} must be {kind}, got {value!r}")
        if not (low <= value <= high and math.isfinite(value)):
            raise ValueError(f"{prefix}.{name} must be {_range(low, high)}, got {value:,}")


def check_declared(settings: type) -> None:
    """Raise ValueError naming what is wrong with the BOUNDS a config class declares (a user's, at
    create): not a mapping, a key that is not one of its fields, a value that is not (low, high)."""
    declared, where = getattr(settings, "BOUNDS", None), f"{settings.__name__}.BOUNDS"
    if not isinstance(declared, Mapping):
        raise ValueError(
            f"{where} must be a mapping of setting -> (low, high), got a {type(declared).__name__}"
        )
    names = {f.name for f in fields(settings)}
    for name, pair in declared.items():
        if name not in names:
            raise ValueError(f"{where} names {reprlib.repr(name)}, not a field of {settings.__name__}")
        numbers = (
            isinstance(pair, tuple | list)
            and len(pair) == 2
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in pair)
        )
        if not (numbers and pair[0] <= pair[1]):
            raise ValueError(f"{where}[{name!r}] must be (low, high), numbers with low <= high, "
                             f"got {reprlib.repr(pair)}")  # fmt: skip


def _range(low: float, high: float) -> str:
    if isinstance(low, int):
        return f"an integer from {low:,} to {int(high):,}"
    above = "> 0" if 0 < low < OPEN else f">= {low:g}"
    return above if high >= UNBOUNDED else f"{above} and <= {high:g}"


def check_widths(prefix: str, widths: Sequence[int], *, empty: bool = False) -> None:
    """Hidden layer widths: at most MAX_LAYERS layers of 1 to MAX_WIDTH units (none only if `empty`)."""
    if (not widths and not empty) or len(widths) > MAX_LAYERS or not all(1 <= w <= MAX_WIDTH for w in widths):
        raise ValueError(f"{prefix}.hidden_sizes must be {'' if empty else '1 to '}{MAX_LAYERS} widths "
                         f"from 1 to {MAX_WIDTH:,}, got {list(widths)[:8]}")  # fmt: skip


def mlp_parameters(sizes: Sequence[int]) -> int:
    """Weights and biases of an MLP of layer `sizes` (input, hidden..., output)."""
    return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:], strict=False))


def check_learner_memory(prefix: str, parameters: int, batch_bytes: int = 0) -> None:
    """Refuse networks (and a batch) a learner rank cannot hold in LEARNER_MEMORY_MB: the
    network's parameters at BYTES_PER_PARAMETER each and the batch must fit in half of it (the
    rest is the forward pass's activations, the interpreter, torch)."""
    need = parameters * BYTES_PER_PARAMETER + batch_bytes
    if need > LEARNER_MEMORY_MB * 2**20 // 2:
        raise ValueError(f"{prefix}: a network of {parameters:,} parameters and a batch of "
                         f"{batch_bytes / 2**20:,.1f} MiB need {need / 2**30:,.1f} GiB, over the "
                         f"{LEARNER_MEMORY_MB / 2 / 1024:g} GiB a learner rank has for them: lower "
                         f"{prefix}.hidden_sizes or the batch")  # fmt: skip

"""The algorithms surreal ships, and a researcher's own: `--algo MODULE:NAME` imports MODULE (from
the creating shell's import path, as `--env MODULE:ENV` does) and takes its NAME, a subclass of
api.Algorithm (most often of api.OnPolicy: examples/a2c.py) or an instance of one."""

from __future__ import annotations

import importlib

from surreal.algorithms.api import Algorithm, OnPolicy, OnPolicyConfig
from surreal.algorithms.envs.ref import ours, raised
from surreal.algorithms.es import ES
from surreal.algorithms.ppo import PPO
from surreal.algorithms.sac import SAC

ALGORITHMS: dict[str, Algorithm] = {"ppo": PPO(), "es": ES(), "sac": SAC()}


def get_algorithm(name: str) -> Algorithm:
    """The algorithm `name` names: one of ALGORITHMS, or MODULE:NAME. Raises ValueError naming the
    problem in one line."""
    if name in ALGORITHMS:
        return ALGORITHMS[name]
    module, sep, attr = name.partition(":")
    if not sep:
        known = ", ".join(sorted(ALGORITHMS))
        raise ValueError(f"unknown algorithm {name!r} (known: {known}; your own: MODULE:NAME)")
    if not module or not attr.isidentifier():
        raise ValueError(f"algorithm {name!r}: expected MODULE:NAME, NAME an algorithm in MODULE")
    try:
        found = getattr(importlib.import_module(module), attr, None)
    except BaseException as exc:  # the user's code: whatever its import raises, but a Ctrl-C
        if ours(exc):
            raise
        hint = (
            " (is it on PYTHONPATH or in the current directory?)"
            if isinstance(exc, ModuleNotFoundError)
            else ""
        )
        raise ValueError(
            f"algorithm {name!r}: cannot import module {module!r}: {raised(exc)}{hint}"
        ) from None
    if found is None:
        raise ValueError(f"algorithm {name!r}: module {module!r} defines no {attr!r}")
    algorithm = found
    if isinstance(found, type) and issubclass(found, Algorithm):
        try:
            algorithm = found()
        except BaseException as exc:
            if ours(exc):
                raise
            raise ValueError(f"algorithm {name!r}: cannot make it: {raised(exc)}") from None
    if not isinstance(algorithm, Algorithm):
        raise ValueError(f"algorithm {name!r}: {attr} (a {type(found).__name__!r}) is not an algorithm "
                         "(a subclass of surreal.algorithms.api.OnPolicy or Algorithm)")  # fmt: skip
    if isinstance(algorithm, OnPolicy) and not (
        isinstance(algorithm.Config, type) and issubclass(algorithm.Config, OnPolicyConfig)
    ):
        raise ValueError(f"algorithm {name!r}: its Config must be a dataclass deriving from OnPolicyConfig")
    if not isinstance(getattr(algorithm, "name", None), str):
        raise ValueError(f"algorithm {name!r}: it must have a name (a string)")
    return algorithm

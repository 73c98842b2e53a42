"""The algorithms surreal ships, and a researcher's own: `--algo MODULE:NAME` imports MODULE (from
the creating shell's import path, as `--env MODULE:ENV` does) and takes its NAME, a subclass of
api.Algorithm (most often of api.OnPolicy: examples/a2c.py) or an instance of one."""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Callable, Iterator
from typing import Any

from surreal.algorithms.api import Algorithm, check_algorithm, check_settings, their_hook
from surreal.algorithms.dqn import DQN
from surreal.algorithms.es import ES
from surreal.algorithms.ppo import PPO
from surreal.algorithms.sac import SAC
from surreal.algorithms.td3 import TD3
from surreal.runtime.envs.ref import ours, raised

ALGORITHMS: dict[str, Algorithm] = {"ppo": PPO(), "es": ES(), "sac": SAC(), "td3": TD3(), "dqn": DQN()}
_OWN: dict[str, Algorithm] = {}  # a user's, by MODULE:NAME: imported and checked once a process
# The hooks `surreal create` calls (spec.build_spec) on a user's algorithm, with what each may raise
# as a refusal (its contract: a ValueError that names the problem); anything else is a bug in it.
CREATE_HOOKS: dict[str, tuple[type[BaseException], ...]] = {
    "resolve_env": (ValueError,), "check_env": (ValueError,), "check_config": (ValueError,),
    "check_local": (ValueError,), "preset": (), "default_steps": (),
}  # fmt: skip


def get_algorithm(name: str) -> Algorithm:
    """The algorithm `name` names: one of ALGORITHMS, or MODULE:NAME. Raises ValueError naming the
    problem in one line."""
    if name in ALGORITHMS:
        return ALGORITHMS[name]
    if name not in _OWN:
        _OWN[name] = _load(name)
    return _OWN[name]


def _load(name: str) -> Algorithm:
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
        missing = isinstance(exc, ModuleNotFoundError) and f"{module}.".startswith(f"{exc.name}.")
        hint = " (put the folder that holds it on PYTHONPATH, or run from that folder)" if missing else ""
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
    with _named(name):
        check_algorithm(algorithm)
    for hook in CREATE_HOOKS:  # the instance's own: they shadow the class's
        setattr(algorithm, hook, _their(name, algorithm, hook))
    return algorithm


@contextlib.contextmanager
def _named(name: str) -> Iterator[None]:
    try:
        yield
    except ValueError as exc:
        raise ValueError(f"algorithm {name!r}: {exc}") from None


def _their(name: str, algorithm: Algorithm, hook: str) -> Callable[..., Any]:
    """`algorithm`'s `hook` as create calls it: what it raises, but a refusal, is one line naming
    the algorithm, the hook and the exception, and a preset must give a config the spec can hold."""
    fn = getattr(algorithm, hook)

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        with their_hook(f"algorithm {name!r}: {hook}", CREATE_HOOKS[hook]):
            result = fn(*args, **kwargs)
        if hook == "preset":
            with _named(name):
                check_settings(algorithm, result, "preset")
        return result

    return call

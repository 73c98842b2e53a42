"""Which environment an experiment names, and how to build it: registered ids, a user's module.

`--env` takes what gymnasium's own `gym.make` takes, and one thing more:
- a registered id: `CartPole-v1`, `ALE/Breakout-v5` (every installed gymnasium plugin's ids);
- `module:EnvId`: import `module` (which registers `EnvId` on import), then make `EnvId`;
- `module:Class` (or any callable in the module): an entry point, made without a registration.

with keyword arguments (`env_kwargs`) passed to the environment's constructor. Everything that can
go wrong is raised as one ValueError naming the module, the id and the cause, so `surreal create`
refuses before anything exists. Components resolve the same string, so every one of them builds
the same environment; they find the user's module on the import path the launcher gives them
(`SURREAL_IMPORT_PATH` locally, the image on Kubernetes).
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from surreal.algorithms.common import atari

IMPORT_PATH_VAR = "SURREAL_IMPORT_PATH"  # os.pathsep-separated folders components import from


@dataclass(frozen=True)
class EnvRef:
    """An environment as the spec names it: `name` (an id, `module:EnvId` or `module:Class`) and
    the keyword arguments its constructor gets."""

    name: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.name


def as_env_ref(env: EnvRef | str) -> EnvRef:
    return env if isinstance(env, EnvRef) else EnvRef(env)


def extend_import_path(paths: Iterable[str]) -> None:
    """Make `paths` importable, after what is already on sys.path: a user's folder never shadows
    an installed package (the repository root holds a folder named `surreal`, for one)."""
    for path in paths:
        if path and path not in sys.path:
            sys.path.append(path)


def import_path_from_environ() -> None:
    """Components call this first: the launcher's `SURREAL_IMPORT_PATH` onto sys.path."""
    extend_import_path(os.environ.get(IMPORT_PATH_VAR, "").split(os.pathsep))


def resolve(env: EnvRef | str) -> str | gym.envs.registration.EnvSpec:
    """What `gym.make` takes for `env`: a registered id, or a spec whose entry point is the user's
    class. Raises ValueError naming the module, the id and the cause."""
    name = as_env_ref(env).name
    module, sep, target = name.partition(":")
    if not sep:
        _check_registered(name)
        return name
    if not module or not target:
        raise ValueError(f"environment {name!r}: expected MODULE:ENV_ID or MODULE:CLASS")
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # the user's module may raise anything while importing
        raise ValueError(
            f"environment {name!r}: cannot import module {module!r}: {type(exc).__name__}: {exc} "
            "(is it on PYTHONPATH or in the current directory?)"
        ) from None
    if target in gym.registry:
        return target
    entry = getattr(mod, target, None)
    if callable(entry):
        return gym.envs.registration.EnvSpec(id=name, entry_point=entry, disable_env_checker=True)
    raise ValueError(
        f"environment {name!r}: module {module!r} neither registers an environment {target!r} "
        f"on import nor defines a class or function {target!r}"
    )


def _check_registered(env_id: str) -> None:
    if env_id not in gym.registry:
        atari.register_ale()  # gymnasium 1.x registers ALE's ids only when asked to
    if env_id in gym.registry:
        return
    close = difflib.get_close_matches(env_id, list(gym.registry.keys()), n=3)
    hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
    raise ValueError(
        f"unknown environment '{env_id}'{hint}; a module of your own is named as MODULE:ENV_ID "
        "or MODULE:CLASS"
    )


def entry_point(resolved: str | gym.envs.registration.EnvSpec) -> str:
    """The entry point of a resolved environment, as text (to tell MuJoCo and Atari ones)."""
    spec = resolved if isinstance(resolved, gym.envs.registration.EnvSpec) else gym.spec(resolved)
    ep = spec.entry_point
    return ep if isinstance(ep, str) else f"{getattr(ep, '__module__', '')}:{getattr(ep, '__name__', '')}"


@contextmanager
def construction_errors(env: EnvRef) -> Iterator[None]:
    """Whatever building `env` raises (a user's constructor may raise anything, ALE refuses unknown
    kwargs) as one ValueError naming the environment and its kwargs."""
    try:
        yield
    except Exception as exc:
        given = f" with env_kwargs {dict(env.kwargs)}" if env.kwargs else ""
        raise ValueError(
            f"environment {env.name!r}: cannot be made{given}: {type(exc).__name__}: {exc}"
        ) from None


def make_raw(resolved: str | gym.envs.registration.EnvSpec, env: EnvRef) -> gym.Env:
    """`gym.make` of a resolved environment with the ref's kwargs, without the passive checker."""
    with construction_errors(env):
        return gym.make(resolved, disable_env_checker=True, **env.kwargs)

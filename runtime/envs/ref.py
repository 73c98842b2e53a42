"""Which environment an experiment names, and how to build it: registered ids, a user's module.

`--env` takes what gymnasium's own `gym.make` takes, and one thing more:
- a registered id: `CartPole-v1`, `ALE/Breakout-v5` (every installed gymnasium plugin's ids);
- `module:EnvId`: import `module` (which registers `EnvId` on import), then make `EnvId`;
- `module:Class` (or any callable in the module): an entry point, made without a registration.

with keyword arguments (`env_kwargs`) passed to the environment's constructor. Everything that can
go wrong is raised as one ValueError naming the module, the id and the cause, so `surreal create`
refuses before anything exists: whatever the user's code raises (`users_code`), SystemExit included
(a module that calls sys.exit or runs argparse when imported), is named as theirs; only a Ctrl-C
interrupts. Components resolve the same string, so every one of them builds the same environment;
they find the user's module on the import path the launcher gives them (`SURREAL_IMPORT_PATH`
locally, the image on Kubernetes).
"""

from __future__ import annotations

import difflib
import importlib
import math
import os
import reprlib
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from surreal.runtime.envs import atari
from surreal.runtime.envs.act_leaves import ActionLayout, ActLeaf
from surreal.runtime.envs.obs_leaves import UNSUPPORTED, ObsLeaf

IMPORT_PATH_VAR = "SURREAL_IMPORT_PATH"  # os.pathsep-separated folders components import from


@dataclass(frozen=True)
class EnvRef:
    """An environment as the spec names it: `name` (an id, `module:EnvId` or `module:Class`) and
    the keyword arguments its constructor gets."""

    name: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, kw_only=True)
class ResolvedEnv:
    """What resolving an environment and building one throwaway instance of it found
    (envs.resolve_env): everything the algorithms derive from the environment before training.
    `surreal create` finds it once and writes it into the spec file (`resolved:`), so that no
    component resolves the reference again or builds an environment only to learn its spaces.
    Plain values only (it is YAML in the spec file); `validate` checks they hang together."""

    env: str
    """The reference this was found for (ExperimentSpec.env): a spec whose `env` or
    `env_kwargs` no longer match is refused rather than trusted."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """The constructor's keyword arguments it was found with (ExperimentSpec.env_kwargs; left
    out of the spec file when empty, as that is)."""
    entry_point: str
    """What gym.make calls, as "module:name" (MuJoCo and Atari environments are told by it)."""
    atari: bool
    """An Atari game registered by ale_py: made with atari.py's preprocessing, PPO's ATARI preset."""
    obs_dim: int
    """Size of one observation, flattened (C*H*W for images)."""
    image_shape: tuple[int, ...] | None
    """(C, H, W) of uint8 image observations (a CNN policy: "pixels"); None for vectors."""
    discrete: bool
    """Discrete actions from 0 (true), or a 1-D Box of continuous ones or act_leaves (false)."""
    action_dim: int
    """Number of actions (Discrete), length of the action vector (Box), or columns of an action row
    (act_leaves)."""
    action_low: tuple[float, ...] | None
    """Lower bounds of Box actions, one per action; None for Discrete and act_leaves."""
    action_high: tuple[float, ...] | None
    """Upper bounds of Box actions, one per action; None for Discrete and act_leaves."""
    obs_leaves: tuple[dict[str, Any], ...] = ()
    """Observations that are not one Box: their leaves (obs_leaves.ObsLeaf.to_dict), every one
    described, also those a policy cannot take (obs_keys chooses; EnvSpaces.keep refuses). Left
    out of the spec file for a Box."""
    act_leaves: tuple[dict[str, Any], ...] = ()
    """Actions that are not one Discrete from 0 or one 1-D Box: their leaves
    (act_leaves.ActLeaf.to_dict). Left out of the spec file for those."""
    time_limit: int | None = None
    """The env steps after which the environment's registration cuts an episode (its
    max_episode_steps); None: it has none, and surreal gives it one (spec.MAX_EPISODE_STEPS)."""

    @property
    def pixels(self) -> bool:
        """Observations are uint8 images."""
        return self.image_shape is not None

    @property
    def ref(self) -> EnvRef:
        """The environment this describes, as components build it."""
        return EnvRef(self.env, self.env_kwargs)

    def validate(self) -> None:
        """Raise ValueError naming the first field that does not fit the others (a hand-edited or
        corrupted spec file)."""
        if not self.env:
            raise ValueError("env must name the environment")
        if not self.entry_point:
            raise ValueError("entry_point must name the environment's constructor")
        if self.obs_dim < 1 and not self.obs_leaves:
            raise ValueError(f"obs_dim must be a positive integer, got {self.obs_dim}")
        if self.obs_leaves:
            leaves = [ObsLeaf.from_dict(leaf) for leaf in self.obs_leaves]
            width = sum(leaf.width for leaf in leaves if leaf.kind != UNSUPPORTED)
            if width != self.obs_dim or self.image_shape is not None:
                raise ValueError(f"obs_dim must be the leaves' width ({width}) and image_shape null "
                                 "for observations of several leaves")  # fmt: skip
        if self.image_shape is not None:
            shape = self.image_shape
            if len(shape) != 3 or min(shape) < 1:
                raise ValueError(f"image_shape must be 3 positive sizes (C, H, W), got {list(shape)}")
            if shape[0] * shape[1] * shape[2] != self.obs_dim:
                raise ValueError(f"image_shape {list(shape)} does not hold obs_dim {self.obs_dim} values")
        if self.action_dim < 1:
            raise ValueError(f"action_dim must be a positive integer, got {self.action_dim}")
        if self.time_limit is not None and self.time_limit < 1:
            raise ValueError(f"time_limit must be a positive integer or null, got {self.time_limit}")
        low, high = self.action_low, self.action_high
        if self.act_leaves:
            columns = ActionLayout([ActLeaf.from_dict(leaf) for leaf in self.act_leaves]).columns
            if self.discrete or columns != self.action_dim or low is not None or high is not None:
                raise ValueError(f"action_dim must be the act_leaves' columns ({columns}), discrete "
                                 "false and action_low/action_high null for actions of several "
                                 "leaves")  # fmt: skip
            return
        if self.discrete:
            if low is not None or high is not None:
                raise ValueError("action_low and action_high must be null for discrete actions")
            return
        if low is None or high is None or not len(low) == len(high) == self.action_dim:
            raise ValueError(
                f"action_low and action_high must each hold action_dim ({self.action_dim}) bounds "
                "for continuous actions"
            )
        if not all(math.isfinite(lo) and math.isfinite(hi) for lo, hi in zip(low, high, strict=True)):
            raise ValueError("action_low and action_high must be finite for every action (the "
                             "policy's actions are clipped to a Box's bounds)")  # fmt: skip
        if not all(lo <= hi for lo, hi in zip(low, high, strict=True)):
            raise ValueError("action_low must be <= action_high for every action")


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
    with users_code(as_env_ref(env), f"cannot import module {module!r}"):
        mod = importlib.import_module(module)
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


def raised(exc: BaseException) -> str:
    """What the user's code raised, in one line of bounded length: "ValueError: boom", "SystemExit: 2"."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:300]}" if lines else type(exc).__name__


def ours(exc: BaseException) -> bool:
    """Whether `exc`, raised while the user's code ran, is not theirs: a Ctrl-C, or the SystemExit of
    a stop a component was asked for (its SIGTERM handler: preemption.py)."""
    from surreal.runtime import preemption  # here: preemption imports run, which imports this

    return isinstance(exc, KeyboardInterrupt) or (isinstance(exc, SystemExit) and preemption.requested())


def their_error(env: EnvRef, doing: str, exc: BaseException, error: Any = ValueError) -> BaseException:
    """`exc`, raised by the user's code while `doing`, as one `error` naming the environment (`exc`
    itself where it is `ours`). A missing module gets a hint where to put it."""
    if ours(exc):
        return exc
    hint = (
        " (is it on PYTHONPATH or in the current directory?)" if isinstance(exc, ModuleNotFoundError) else ""
    )
    return error(f"environment {env.name!r}: {doing}: {raised(exc)}{hint}")  # type: ignore[no-any-return]


@contextmanager
def users_code(env: EnvRef, doing: str) -> Iterator[None]:
    """Run the user's code (their module's import, constructor, reset, step, close): whatever it
    raises, any BaseException but `ours`, is one ValueError naming the environment (their_error)."""
    try:
        yield
    except BaseException as exc:
        raise their_error(env, doing, exc) from None


def construction_errors(env: EnvRef) -> AbstractContextManager[None]:
    """Whatever building `env` raises (a user's constructor may raise anything, ALE refuses unknown
    kwargs) as one ValueError naming the environment and its kwargs."""
    given = f" with env_kwargs {reprlib.repr(dict(env.kwargs))}" if env.kwargs else ""  # bounded
    return users_code(env, f"cannot be made{given}")


def make_raw(resolved: str | gym.envs.registration.EnvSpec, env: EnvRef) -> gym.Env:
    """`gym.make` of a resolved environment with the ref's kwargs, without the passive checker."""
    with construction_errors(env):
        return gym.make(resolved, disable_env_checker=True, **env.kwargs)

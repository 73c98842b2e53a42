"""Environment construction and a batch of environments stepped in one process.

`EnvBatch` is the actors' hot path: one Python loop over the envs per step, numpy buffers,
and the rare episode-end bookkeeping kept out of the common case.

An environment is the user's code. `surreal create` builds one (`resolve_env`) and checks it against
everything a component will rely on (_probe). In a component, what it raises, or nothing but
non-finite data, fails the role for good (EnvFailed): retrying would run the same code again.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable
from contextlib import redirect_stderr, redirect_stdout
from typing import Any, NamedTuple, SupportsFloat

import gymnasium as gym
import numpy as np

from surreal.protocol.ratelimit import RejectionLog
from surreal.runtime.envs import act_leaves, atari, obs_leaves
from surreal.runtime.envs.act_leaves import ActionLayout, ActLeaf
from surreal.runtime.envs.obs_leaves import UNSUPPORTED, ObsLeaf, describe, image_layout, select
from surreal.runtime.envs.ref import (
    EnvRef,
    ResolvedEnv,
    as_env_ref,
    construction_errors,
    entry_point,
    make_raw,
    raised,
    resolve,
    their_error,
    users_code,
)
from surreal.runtime.exits import EXIT_ENV_FAILED
from surreal.runtime.run import RoleFailed

log = logging.getLogger(__name__)

# An actor whose environments gave nothing but non-finite observations or rewards this long fails
# for good (EnvFailed): an EnvBatch every one of whose environments broke at each of this many steps
# in a row, or an ES worker that dropped this many pairs in a row (each at least one step) and
# finished none. Counted in steps, not seconds: as deterministic as the environment.
BROKEN_STEPS = 1000


class EnvFailed(RoleFailed):
    """The user's environment failed in a component: it raised, or gave nothing but non-finite data
    (BROKEN_STEPS). Its role fails for good (EXIT_ENV_FAILED), with this message as the reason."""

    def __init__(self, message: str) -> None:
        super().__init__(EXIT_ENV_FAILED, message)


_MUJOCO_WARNINGS: set[str] = set()  # the distinct MuJoCo warnings this process has logged
_MAX_MUJOCO_WARNINGS = 32


def _mujoco_warning(message: str) -> None:
    if message not in _MUJOCO_WARNINGS and len(_MUJOCO_WARNINGS) < _MAX_MUJOCO_WARNINGS:
        _MUJOCO_WARNINGS.add(message)
        log.warning("MuJoCo: %s (logged once per process)", message.strip())


def _route_mujoco_warnings(entry: str) -> None:
    """Send MuJoCo's warnings to the log, each once. Its default handler prints every one and appends
    it to MUJOCO_LOG.TXT in the working directory: HalfCheetah-v5's model warns when compiled, so a
    worker of 256 envs wrote ~100 KB to its log and ~240 KB to that file (read-only in a pod)."""
    if "mujoco" not in entry:
        return
    import mujoco

    if mujoco.get_mju_user_warning() is not _mujoco_warning:
        mujoco.set_mju_user_warning(_mujoco_warning)


def _headless_mujoco_gl() -> None:
    """MuJoCo renders off-screen through EGL on a Linux machine without a display (a server, a
    pod), unless MUJOCO_GL says otherwise: gymnasium tries GLFW first, whose context is made without
    a display and fails only at the first frame ("an OpenGL platform library has not been loaded").
    Set for every environment made to render: MuJoCo ones are not all told by their entry point
    (gymnasium-robotics' mazes), and no other renderer reads it."""
    headless = sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    )
    if headless:
        os.environ.setdefault("MUJOCO_GL", "egl")


def make_env(env: EnvRef | str, seed: int, *, training: bool = True) -> gym.Env:
    """Create `env` with its TimeLimit and kwargs, without the (slow) passive checker, RNG seeded.

    Atari games get the standard preprocessing (atari.py); `training` adds what only training
    wants there (episodic life, clipped rewards). Raises ValueError naming the environment."""
    ref = as_env_ref(env)
    return _make_resolved(ref, resolve(ref), seed, training=training)


def _make_resolved(
    ref: EnvRef, resolved: str | gym.envs.registration.EnvSpec, seed: int, *, training: bool = True
) -> gym.Env:
    if isinstance(resolved, str) and atari.is_atari(resolved):
        with construction_errors(ref):
            return atari.make_atari(resolved, seed, training=training, **ref.kwargs)
    _route_mujoco_warnings(entry_point(resolved))
    if "render_mode" in ref.kwargs:
        _headless_mujoco_gl()
    made = make_raw(resolved, ref)
    with users_code(ref, "reset failed"):
        # Seeding via reset makes every later reset() draw from this seeded generator.
        made.reset(seed=seed)
    for attr in ("observation_space", "action_space"):
        space = getattr(made, attr, None)
        if not isinstance(space, gym.spaces.Space):
            got = "missing" if space is None else f"a {type(space).__name__}"
            raise ValueError(f"environment {ref.name!r}: its {attr} is {got}, not a gymnasium space")
    made.action_space.seed(seed)
    return made


class EnvSpaces(NamedTuple):
    """What a network needs to know about an environment."""

    obs_dim: int  # observation size, flattened (C*H*W for images; a packed row's width: obs_leaves)
    discrete: bool  # one Discrete from 0: actions are int64 indices
    action_dim: int  # number of actions (Discrete), or an action row's length (Box; act_leaves)
    action_low: np.ndarray | None  # 1-D Box bounds, None otherwise
    action_high: np.ndarray | None
    image_shape: tuple[int, int, int] | None = None  # (C, H, W) of uint8 images; None: a vector
    # Observations that are not one Box (obs_leaves.py): their leaves, () for a Box. A policy sees
    # those `keep` selects; batches hold them as leaf arrays, networks as packed float32 rows.
    obs_leaves: tuple[ObsLeaf, ...] = ()
    # Actions that are not one Discrete from 0 or one 1-D Box (act_leaves.py): their leaves, () for
    # those. Such actions are float32 rows: categorical indices, then Gaussian values.
    act_leaves: tuple[ActLeaf, ...] = ()

    @property
    def structured_actions(self) -> bool:
        """Actions are leaves (act_leaves.py), not one Discrete or one 1-D Box."""
        return bool(self.act_leaves)

    @property
    def action_layout(self) -> ActionLayout:
        """The columns of an action row (act_leaves.ActionLayout); only with structured_actions."""
        return act_leaves.layout(self.act_leaves)

    @property
    def head_dim(self) -> int:
        """Outputs of the policy head: logits of a Discrete, Gaussian means of a Box, both for leaves."""
        return self.action_layout.head_dim if self.act_leaves else self.action_dim

    @property
    def gaussian_dim(self) -> int:
        """Gaussian action columns, each with its learned log std (0: no log_std)."""
        if self.act_leaves:
            return self.action_layout.gaussian
        return 0 if self.discrete else self.action_dim

    @property
    def pixels(self) -> bool:
        """Observations are uint8 images (a CNN policy; uint8 on the wire)."""
        return self.image_shape is not None

    @property
    def has_image(self) -> bool:
        """The policy sees an image: the whole observation, or one of its leaves (a CNN)."""
        return self.image_shape is not None or any(leaf.kind == "image" for leaf in self.obs_leaves)

    @property
    def structured(self) -> bool:
        """Observations are leaves (obs_leaves.py), not one Box."""
        return bool(self.obs_leaves)

    @property
    def obs_shape(self) -> tuple[int, ...]:
        """One observation as a network takes it: (C, H, W) images or (D,) vectors (packed rows)."""
        return self.image_shape if self.image_shape is not None else (self.obs_dim,)

    @property
    def obs_dtype(self) -> type[np.generic]:
        return np.uint8 if self.image_shape is not None else np.float32

    def env_actions(self, space: gym.Space, actions: np.ndarray) -> Any:
        """Actions [N, ...] as the environments' `step` takes them: python ints for a Discrete
        (cheapest for Discrete.contains), rows of leaves rebuilt (act_leaves.py), a Box's clipped."""
        if self.discrete:
            return actions.tolist()
        if self.act_leaves:
            return [self.action_layout.to_env(space, row) for row in actions]
        return np.clip(actions, self.action_low, self.action_high)

    def keep(self, obs_keys: Iterable[str], env: str = "the environment") -> EnvSpaces:
        """These spaces as a policy observing the top-level keys `obs_keys` sees them (every key
        when empty): ValueError naming the key the policy cannot take (obs_leaves.select)."""
        keys = tuple(obs_keys)
        if not self.structured:
            if keys:
                raise ValueError(f"obs_keys {','.join(keys)}: {env}'s observations are one Box, with no keys")
            return self
        leaves = select(self.obs_leaves, keys, env)
        return self._replace(obs_leaves=leaves, obs_dim=sum(leaf.width for leaf in leaves))


def env_spaces(env: gym.Env) -> EnvSpaces:
    """Describe `env`'s spaces; raise ValueError for the action spaces we do not support. Every
    observation space is described (obs_leaves.py); `EnvSpaces.keep` refuses what a policy cannot
    take."""
    obs_space, act_space = env.observation_space, env.action_space
    if isinstance(obs_space, gym.spaces.Box):
        obs_dim = int(np.prod(obs_space.shape))
        image = image_layout(obs_space)
        image_shape = image[1] if image else None
        leaves: tuple[ObsLeaf, ...] = ()
    else:
        leaves = tuple(describe(obs_space))
        obs_dim = sum(leaf.width for leaf in leaves if leaf.kind != UNSUPPORTED)
        image_shape = None
    if not act_leaves.is_plain(act_space):
        acts = tuple(act_leaves.describe(act_space))
        columns = act_leaves.layout(acts).columns
        return EnvSpaces(obs_dim, False, columns, None, None, image_shape, leaves, acts)
    if isinstance(act_space, gym.spaces.Discrete):
        return EnvSpaces(obs_dim, True, int(act_space.n), None, None, image_shape, leaves)
    assert isinstance(act_space, gym.spaces.Box)  # is_plain: a Discrete from 0 or a 1-D Box
    low = act_space.low.astype(np.float32)
    high = act_space.high.astype(np.float32)
    return EnvSpaces(obs_dim, False, int(act_space.shape[0]), low, high, image_shape, leaves)


def obs_layout(space: gym.Space) -> str:
    """How `shaped_obs` turns one of `space`'s observations into what the networks take: "flat", or
    an image's `image_layout`."""
    layout = image_layout(space)
    return layout[0] if layout else "flat"


def shaped_obs(layout: str, o: np.ndarray) -> np.ndarray:
    """One raw observation as a batch row: a flat vector, or a (C, H, W) image (channels-last ones
    transposed; "hw" and "chw" as they are, a batch row of (1, H, W) takes an (H, W) image)."""
    if layout == "flat":
        return np.ravel(o)
    if layout == "hwc":
        return np.moveaxis(o, -1, 0)
    return o


_SPACES: dict[str, EnvSpaces] = {}  # spaces_for's answers in this process, by env and kwargs


def _key(ref: EnvRef) -> str:
    return repr((ref.name, sorted(ref.kwargs.items())))


def spaces_for(env: EnvRef | str) -> EnvSpaces:
    """`env_spaces` of a throwaway instance of `env`, made at most once per process, and not at
    all in a component: it starts with `use_resolved` of the spec's ResolvedEnv."""
    ref = as_env_ref(env)
    if _key(ref) not in _SPACES:
        _throwaway_spaces(ref, resolve(ref))
    return _SPACES[_key(ref)]


def _throwaway_spaces(ref: EnvRef, resolved: str | gym.envs.registration.EnvSpec) -> EnvSpaces:
    made = _make_resolved(ref, resolved, 0)
    try:
        spaces = _SPACES[_key(ref)] = _probe(ref, made)
    finally:
        with users_code(ref, "close failed"):
            made.close()
    return spaces


def _probe(ref: EnvRef, env: gym.Env) -> EnvSpaces:
    """`env_spaces(env)`, checked against what `env` gives: the observation of a reset and of one
    step with a sampled action each go into a batch row as EnvBatch puts them (every leaf a policy
    may take), finite where the batch checks, and the reward is a finite number. ValueError naming
    the environment, what it gave and what its space says."""
    spaces = env_spaces(env)
    sp = spaces._replace(obs_leaves=tuple(leaf for leaf in spaces.obs_leaves if leaf.kind != UNSUPPORTED))
    layout, space = obs_layout(env.observation_space), repr(env.observation_space)[:200]
    reward: SupportsFloat = 0.0
    for doing in ("reset", "step"):
        with users_code(ref, f"{doing} failed"):
            if doing == "reset":
                obs = env.reset(seed=0)[0]
            else:
                obs, reward = env.step(env.action_space.sample())[:2]
        row = _new_obs(sp, 1)
        try:
            if sp.structured:
                obs_leaves.put(sp.obs_leaves, row, 0, obs)  # type: ignore[arg-type]
            else:
                row[0] = shaped_obs(layout, obs)  # type: ignore[index]
        except Exception as exc:  # noqa: BLE001 - whatever numpy says of what the environment gave
            given = (
                f"an array of shape {obs.shape} ({obs.dtype})"
                if isinstance(obs, np.ndarray)
                else f"a {type(obs).__name__}"
            )
            raise ValueError(f"environment {ref.name!r}: {doing} gave {given}, which its observation space "
                             f"{space} does not describe ({raised(exc)})") from None  # fmt: skip
        try:
            finite = bool(_finite_rows(sp, row, 1).all() and np.isfinite(np.float32(reward)))
        except (TypeError, ValueError):  # a reward that is not one number
            finite = False
        if not finite:
            raise ValueError(f"environment {ref.name!r}: {doing} gave a non-finite observation or a reward "
                             f"that is not a finite number; its observation space is {space}")  # fmt: skip
    return spaces


def resolve_env(env: EnvRef | str) -> ResolvedEnv:
    """Resolve `env` and describe one throwaway instance of it (made once per process), checked as
    every component will check it (_probe, ResolvedEnv.validate): what `surreal create` writes into
    the spec file. Raises ValueError naming the environment when the reference does not resolve,
    its code fails, or what it gives does not fit its spaces or they are not supported. What the
    user's code prints meanwhile is dropped: the CLI's output is its own."""
    ref = as_env_ref(env)
    with open(os.devnull, "w") as sink, redirect_stdout(sink), redirect_stderr(sink):
        resolved = resolve(ref)
        spaces = _SPACES.get(_key(ref)) or _throwaway_spaces(ref, resolved)

    def bounds(values: np.ndarray | None) -> tuple[float, ...] | None:
        return None if values is None else tuple(float(v) for v in values)

    facts = ResolvedEnv(
        env=ref.name,
        env_kwargs=dict(ref.kwargs),
        entry_point=entry_point(resolved),
        atari=isinstance(resolved, str) and atari.is_atari(resolved),
        obs_dim=spaces.obs_dim,
        image_shape=spaces.image_shape,
        discrete=spaces.discrete,
        action_dim=spaces.action_dim,
        action_low=bounds(spaces.action_low),
        action_high=bounds(spaces.action_high),
        obs_leaves=tuple(leaf.to_dict() for leaf in spaces.obs_leaves),
        act_leaves=tuple(leaf.to_dict() for leaf in spaces.act_leaves),
        time_limit=(
            resolved if isinstance(resolved, gym.envs.registration.EnvSpec) else gym.spec(resolved)
        ).max_episode_steps,  # fmt: skip
    )
    try:
        facts.validate()  # what every component checks of its spec file's `resolved` section
    except ValueError as exc:
        raise ValueError(f"environment {ref.name!r}: its spaces cannot be trained on: {exc}") from None
    return facts


def spaces_of(facts: ResolvedEnv) -> EnvSpaces:
    """The EnvSpaces a ResolvedEnv describes (float32 bounds, as env_spaces gives them)."""

    def bounds(values: tuple[float, ...] | None) -> np.ndarray | None:
        return None if values is None else np.array(values, np.float32)

    shape = facts.image_shape
    image = (shape[0], shape[1], shape[2]) if shape is not None else None
    leaves = tuple(ObsLeaf.from_dict(leaf) for leaf in facts.obs_leaves)
    acts = tuple(ActLeaf.from_dict(leaf) for leaf in facts.act_leaves)
    return EnvSpaces(facts.obs_dim, facts.discrete, facts.action_dim, bounds(facts.action_low),
                     bounds(facts.action_high), image, leaves, acts)  # fmt: skip


def use_resolved(facts: ResolvedEnv) -> None:
    """Let `spaces_for(facts.ref)` answer from `facts` (a spec's, found at create) instead of
    building a throwaway environment: what a component does before its role starts."""
    _SPACES[_key(facts.ref)] = spaces_of(facts)


# A batch of observations: [N, ...] (one Box), or leaf arrays [N, ...] by name (obs_leaves.py).
Obs = np.ndarray | dict[str, np.ndarray]


def _new_obs(sp: EnvSpaces, n: int) -> Obs:
    """Uninitialized observations of `n` envs, as a batch holds them."""
    if sp.structured:
        return obs_leaves.empty(sp.obs_leaves, n)
    return np.empty((n, *sp.obs_shape), sp.obs_dtype)


def _finite_rows(sp: EnvSpaces, obs: Obs, n: int) -> np.ndarray:
    """[n] bool: which envs' observations are finite (images and discrete leaves always are)."""
    if isinstance(obs, dict):
        ok = np.ones(n, bool)
        for leaf in sp.obs_leaves:
            if leaf.kind == "vector":
                ok &= np.isfinite(obs[leaf.name]).all(axis=1)
        return ok
    if sp.pixels:
        return np.ones(n, bool)
    return np.asarray(np.isfinite(obs.reshape(n, -1)).all(axis=1))


class StepResult(NamedTuple):
    """One step of an EnvBatch. Lists are empty in the common case (no episode ended)."""

    obs: Obs  # [N, D] float32 (or leaf arrays); the reset observation where an episode ended
    rewards: np.ndarray  # [N] float32
    terminated: np.ndarray  # [N] bool: the MDP ended (no bootstrap)
    truncated: np.ndarray  # [N] bool: cut by a time limit and not terminated (bootstrap)
    trunc_envs: list[int]  # indices of the truncated envs
    trunc_obs: list[Any]  # their final observations [D] float32 (or leaf rows), same order
    episode_returns: list[float]  # undiscounted returns of episodes that ended this step
    episode_lengths: list[int]


class EnvBatch:
    """N environments stepped in lockstep with automatic reset.

    Box actions are clipped to the action bounds here, so callers keep the unclipped samples
    (whose log-probabilities the policy computed); action rows of several leaves become the
    environment's own actions here (act_leaves.py). Observations come as [N, D] float32 vectors,
    [N, C, H, W] uint8 images (channels-last ones transposed here), or leaf arrays (obs_leaves.py).

    An environment whose step returns a non-finite observation or reward (a MuJoCo simulation gone
    unstable does) ends its episode there, as terminated with reward 0, and is reset: NaN never
    leaves the batch, and one broken episode does not spoil its neighbours' experience.
    `broken_episodes` counts them (logged at a bounded rate; BROKEN_STEPS says when it fails).

    Episode returns are the sums of the rewards the batch saw, except where the environment says
    what a whole game scored (Atari's training stack: a life lost ends the agent's episode and
    rewards are clipped, so the game's own score comes in `info["episode"]` when the game ends).
    """

    def __init__(
        self,
        env: EnvRef | str,
        num_envs: int,
        seed: int,
        *,
        training: bool = True,
        obs_keys: Iterable[str] = (),
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        try:
            self.envs = [make_env(env, seed + i, training=training) for i in range(num_envs)]
        except ValueError as exc:  # the user's module or constructor failed (env_ref names it)
            raise EnvFailed(str(exc)) from None
        self.num_envs = num_envs
        self.spaces = env_spaces(self.envs[0]).keep(obs_keys, str(env))
        self._layout = obs_layout(self.envs[0].observation_space)
        if self.spaces.structured:
            self._put = self._put_leaves  # type: ignore[method-assign]
        self._game_scores = atari.reports_game_episodes(self.envs[0])
        self._ep_return = np.zeros(num_envs, np.float64)
        self._ep_length = np.zeros(num_envs, np.int64)
        self.broken_episodes = 0
        self._broken_steps = 0  # steps in a row at which every env was broken (BROKEN_STEPS)
        self._broken_log = RejectionLog(log, "environment step", interval=60.0)
        self._env_name = str(env)

    def _put(self, out: Obs, i: int, o: Any) -> None:
        out[i] = shaped_obs(self._layout, o)  # type: ignore[index]

    def _put_leaves(self, out: Obs, i: int, o: Any) -> None:
        obs_leaves.put(self.spaces.obs_leaves, out, i, o)  # type: ignore[arg-type]

    def _failed(self, doing: str, exc: BaseException) -> BaseException:
        """What the user's environment raised while `doing`, as EnvFailed (env_ref.their_error)."""
        return their_error(as_env_ref(self._env_name), f"{doing} failed", exc, EnvFailed)

    def reset(self) -> Obs:
        """Reset every env and the episode trackers; return observations [N, ...]."""
        obs = _new_obs(self.spaces, self.num_envs)
        try:
            for i, env in enumerate(self.envs):
                self._put(obs, i, env.reset()[0])
        except BaseException as exc:
            raise self._failed("reset", exc) from None
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0
        return obs

    def step(self, actions: np.ndarray) -> StepResult:
        """Step every env with `actions` [N, ...]; reset those whose episode ended."""
        n, sp = self.num_envs, self.spaces
        acts = sp.env_actions(self.envs[0].action_space, actions)
        obs = _new_obs(sp, n)
        rewards = np.empty(n, np.float32)
        terminated = np.zeros(n, bool)
        truncated = np.zeros(n, bool)
        ended: list[int] = []
        games: dict[int, tuple[float, int]] = {}
        try:
            for i, env in enumerate(self.envs):
                o, r, term, trunc, info = env.step(acts[i])
                self._put(obs, i, o)
                rewards[i] = r
                if term or trunc:
                    ended.append(i)
                    terminated[i] = term
                    truncated[i] = trunc and not term
                    if self._game_scores and "episode" in info:
                        games[i] = (float(info["episode"]["r"]), int(info["episode"]["l"]))
        except BaseException as exc:
            raise self._failed("step", exc) from None
        if not (np.isfinite(rewards).all() and _finite_rows(sp, obs, n).all()):
            ended = self._end_broken(obs, rewards, terminated, truncated, ended)
        else:
            self._broken_steps = 0
        self._ep_return += rewards
        self._ep_length += 1
        if not ended:
            return StepResult(obs, rewards, terminated, truncated, [], [], [], [])
        return self._end_episodes(ended, obs, rewards, terminated, truncated, games)

    def _end_broken(
        self, obs: Obs, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
        ended: list[int],
    ) -> list[int]:  # fmt: skip
        ok = np.isfinite(rewards) & _finite_rows(self.spaces, obs, self.num_envs)
        broken = np.flatnonzero(~ok)
        rewards[broken] = 0.0
        terminated[broken], truncated[broken] = True, False
        self.broken_episodes += len(broken)
        self._broken_steps = self._broken_steps + 1 if len(broken) == self.num_envs else 0
        if self._broken_steps >= BROKEN_STEPS:
            raise EnvFailed(f"environment {self._env_name!r}: all {self.num_envs} made here "
                            f"gave a non-finite observation or reward at each of {BROKEN_STEPS} steps in "
                            "a row: nothing but rejected data")  # fmt: skip
        for i in broken.tolist():
            self._broken_log.note(self._env_name, "non_finite", f"environment {i} returned a non-finite "
                                  "observation or reward; its episode ends there (terminated, "
                                  "reward 0) and it is reset")  # fmt: skip
        return sorted(set(ended) | set(broken.tolist()))

    def _end_episodes(
        self,
        ended: list[int],
        obs: Obs,
        rewards: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        games: dict[int, tuple[float, int]],
    ) -> StepResult:
        trunc_envs = [i for i in ended if truncated[i]]
        trunc_obs = [obs_leaves.row(obs, i) if isinstance(obs, dict) else obs[i].copy() for i in trunc_envs]
        if self._game_scores:  # only whole games are episodes; a lost life is not
            returns = [games[i][0] for i in ended if i in games]
            lengths = [games[i][1] for i in ended if i in games]
        else:
            returns = [float(self._ep_return[i]) for i in ended]
            lengths = [int(self._ep_length[i]) for i in ended]
        try:
            for i in ended:
                self._put(obs, i, self.envs[i].reset()[0])
        except BaseException as exc:
            raise self._failed("reset", exc) from None
        self._ep_return[ended] = 0.0
        self._ep_length[ended] = 0
        return StepResult(obs, rewards, terminated, truncated, trunc_envs, trunc_obs, returns, lengths)

    def close(self) -> None:
        for env in self.envs:
            env.close()

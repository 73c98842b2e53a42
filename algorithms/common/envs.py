"""Environment construction and a batch of environments stepped in one process.

`EnvBatch` is the actors' hot path: one Python loop over the envs per step, numpy buffers,
and the rare episode-end bookkeeping kept out of the common case.
"""

from __future__ import annotations

import difflib
import logging
from typing import NamedTuple

import gymnasium as gym
import numpy as np

from surreal.protocol.ratelimit import RejectionLog

log = logging.getLogger(__name__)


def check_env_id(env_id: str) -> None:
    """Raise ValueError naming `env_id` if gymnasium does not know it."""
    if env_id in gym.registry:
        return
    close = difflib.get_close_matches(env_id, list(gym.registry.keys()), n=3)
    hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
    raise ValueError(f"unknown environment '{env_id}'{hint}")


_MUJOCO_WARNINGS: set[str] = set()  # the distinct MuJoCo warnings this process has logged
_MAX_MUJOCO_WARNINGS = 32


def _mujoco_warning(message: str) -> None:
    if message not in _MUJOCO_WARNINGS and len(_MUJOCO_WARNINGS) < _MAX_MUJOCO_WARNINGS:
        _MUJOCO_WARNINGS.add(message)
        log.warning("MuJoCo: %s (logged once per process)", message.strip())


def _route_mujoco_warnings(env_id: str) -> None:
    """Send MuJoCo's warnings to the log, each once. Its default handler prints every one and appends
    it to MUJOCO_LOG.TXT in the working directory: HalfCheetah-v5's model warns when compiled, so a
    worker of 256 envs wrote ~100 KB to its log and ~240 KB to that file (read-only in a pod)."""
    if "mujoco" not in str(gym.spec(env_id).entry_point):
        return
    import mujoco

    if mujoco.get_mju_user_warning() is not _mujoco_warning:
        mujoco.set_mju_user_warning(_mujoco_warning)


def make_env(env_id: str, seed: int) -> gym.Env:
    """Create `env_id` with its TimeLimit, without the (slow) passive checker, RNG seeded."""
    check_env_id(env_id)
    _route_mujoco_warnings(env_id)
    env = gym.make(env_id, disable_env_checker=True)
    # Seeding via reset makes every later reset() draw from this seeded generator.
    env.reset(seed=seed)
    env.action_space.seed(seed)
    return env


class EnvSpaces(NamedTuple):
    """What a network needs to know about an environment."""

    obs_dim: int
    discrete: bool
    action_dim: int  # number of actions (Discrete) or action vector length (Box)
    action_low: np.ndarray | None  # Box bounds, None for Discrete
    action_high: np.ndarray | None


def env_spaces(env: gym.Env) -> EnvSpaces:
    """Describe `env`'s spaces; raise ValueError for the spaces we do not support."""
    obs_space, act_space = env.observation_space, env.action_space
    if not isinstance(obs_space, gym.spaces.Box):
        raise ValueError(f"unsupported observation space {obs_space} (only Box is supported)")
    obs_dim = int(np.prod(obs_space.shape))
    if isinstance(act_space, gym.spaces.Discrete):
        return EnvSpaces(obs_dim, True, int(act_space.n), None, None)
    if isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1:
        low = act_space.low.astype(np.float32)
        high = act_space.high.astype(np.float32)
        return EnvSpaces(obs_dim, False, int(act_space.shape[0]), low, high)
    raise ValueError(f"unsupported action space {act_space} (only Discrete and 1-D Box)")


def spaces_for(env_id: str) -> EnvSpaces:
    """`env_spaces` of a throwaway instance of `env_id`."""
    env = make_env(env_id, 0)
    try:
        return env_spaces(env)
    finally:
        env.close()


class StepResult(NamedTuple):
    """One step of an EnvBatch. Lists are empty in the common case (no episode ended)."""

    obs: np.ndarray  # [N, D] float32; the reset observation where an episode ended
    rewards: np.ndarray  # [N] float32
    terminated: np.ndarray  # [N] bool: the MDP ended (no bootstrap)
    truncated: np.ndarray  # [N] bool: cut by a time limit and not terminated (bootstrap)
    trunc_envs: list[int]  # indices of the truncated envs
    trunc_obs: list[np.ndarray]  # their final observations [D] float32, same order
    episode_returns: list[float]  # undiscounted returns of episodes that ended this step
    episode_lengths: list[int]


class EnvBatch:
    """N environments stepped in lockstep with automatic reset.

    Box actions are clipped to the action bounds here, so callers keep the unclipped samples
    (whose log-probabilities the policy computed).

    An environment whose step returns a non-finite observation or reward (a MuJoCo simulation gone
    unstable does) ends its episode there, as terminated with reward 0, and is reset: NaN never
    leaves the batch, and one broken episode does not spoil its neighbours' experience.
    `broken_episodes` counts them; they are logged at a bounded rate.
    """

    def __init__(self, env_id: str, num_envs: int, seed: int) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.envs = [make_env(env_id, seed + i) for i in range(num_envs)]
        self.num_envs = num_envs
        self.spaces = env_spaces(self.envs[0])
        self._ep_return = np.zeros(num_envs, np.float64)
        self._ep_length = np.zeros(num_envs, np.int64)
        self.broken_episodes = 0
        self._broken_log = RejectionLog(log, "environment step", interval=60.0)
        self._env_id = env_id

    def reset(self) -> np.ndarray:
        """Reset every env and the episode trackers; return observations [N, D] float32."""
        obs = np.empty((self.num_envs, self.spaces.obs_dim), np.float32)
        for i, env in enumerate(self.envs):
            obs[i] = np.ravel(env.reset()[0])
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0
        return obs

    def step(self, actions: np.ndarray) -> StepResult:
        """Step every env with `actions` [N, ...]; reset those whose episode ended."""
        n, sp = self.num_envs, self.spaces
        if sp.discrete:
            acts = actions.tolist()  # python ints: cheapest for Discrete.contains
        else:
            acts = np.clip(actions, sp.action_low, sp.action_high)
        obs = np.empty((n, sp.obs_dim), np.float32)
        rewards = np.empty(n, np.float32)
        terminated = np.zeros(n, bool)
        truncated = np.zeros(n, bool)
        ended: list[int] = []
        for i, env in enumerate(self.envs):
            o, r, term, trunc, _ = env.step(acts[i])
            obs[i] = np.ravel(o)
            rewards[i] = r
            if term or trunc:
                ended.append(i)
                terminated[i] = term
                truncated[i] = trunc and not term
        if not (np.isfinite(obs).all() and np.isfinite(rewards).all()):
            ended = self._end_broken(obs, rewards, terminated, truncated, ended)
        self._ep_return += rewards
        self._ep_length += 1
        if not ended:
            return StepResult(obs, rewards, terminated, truncated, [], [], [], [])
        return self._end_episodes(ended, obs, rewards, terminated, truncated)

    def _end_broken(
        self, obs: np.ndarray, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
        ended: list[int],
    ) -> list[int]:  # fmt: skip
        broken = np.flatnonzero(~(np.isfinite(obs).all(axis=1) & np.isfinite(rewards)))
        rewards[broken] = 0.0
        terminated[broken], truncated[broken] = True, False
        self.broken_episodes += len(broken)
        for i in broken.tolist():
            self._broken_log.note(self._env_id, "non_finite", f"environment {i} returned a non-finite "
                                  "observation or reward; its episode ends there (terminated, "
                                  "reward 0) and it is reset")  # fmt: skip
        return sorted(set(ended) | set(broken.tolist()))

    def _end_episodes(
        self,
        ended: list[int],
        obs: np.ndarray,
        rewards: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
    ) -> StepResult:
        trunc_envs = [i for i in ended if truncated[i]]
        trunc_obs = [obs[i].copy() for i in trunc_envs]
        returns = [float(self._ep_return[i]) for i in ended]
        lengths = [int(self._ep_length[i]) for i in ended]
        for i in ended:
            obs[i] = np.ravel(self.envs[i].reset()[0])
            self._ep_return[i] = 0.0
            self._ep_length[i] = 0
        return StepResult(obs, rewards, terminated, truncated, trunc_envs, trunc_obs, returns, lengths)

    def close(self) -> None:
        for env in self.envs:
            env.close()

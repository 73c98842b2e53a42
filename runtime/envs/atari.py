"""Atari environments with the standard DQN preprocessing (as CleanRL's `ppo_atari` and baselines).

`make_atari` builds, from the inside out:

1. `gym.make(env_id, frameskip=1, obs_type="grayscale", **kwargs)`: the raw game, one emulator frame
   per step (ALE v5's sticky actions, `repeat_action_probability=0.25`, stay unless the user's kwargs
   change them). Its own observations are thrown away (AtariPreprocessing reads the screen itself),
   and grayscale ones are the cheapest to throw away: ~11% more agent steps/s than RGB.
2. `GameEpisodeStatistics` (gymnasium's `RecordEpisodeStatistics`): innermost, so it sees every frame
   of the real game, including the no-op and FIRE frames the outer wrappers take on reset and whose
   rewards never reach the agent. `info["episode"]` is therefore the game's score and length.
3. gymnasium's `AtariPreprocessing`: up to 30 no-ops on reset, 4 frames per agent step with a
   max-pool over the last 2, grayscale, 84x84 (cv2 INTER_AREA). It is faithful to baselines except
   that it pools the grayscale frames rather than graying the pooled RGB frames (Machado et al.).
4. `EpisodicLife` (training only, written here): a lost life ends the agent's episode as terminated,
   but the next reset continues the same game. gymnasium's `terminal_on_life_loss` is not this: its
   reset always starts a new game, which changes what the agent sees and hides the game's end
   from the innermost statistics.
5. `FireReset` (games with FIRE, written here; gymnasium has none): after every reset press FIRE
   (then action 2, as baselines does), so games that wait for FIRE start. With `EpisodicLife` below it
   this also happens after every lost life in training.
6. `TransformReward(sign)` (training only): rewards clipped to {-1, 0, +1}. gymnasium's `ClipReward`
   clips to an interval, which differs from the sign for fractional rewards.
7. gymnasium's `FrameStackObservation(4)`: uint8 observations of shape (4, 84, 84), channels first;
   the stack starts as 4 copies of the reset frame, like baselines.

Training returns are clipped and training episodes are lives, so an env batch must take the returns it
reports from `info["episode"]` instead of summing rewards: `reports_game_episodes(env)` says so.
"""

from __future__ import annotations

import importlib
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import (
    AtariPreprocessing,
    FrameStackObservation,
    RecordEpisodeStatistics,
    TransformReward,
)

FRAME_SKIP = 4  # emulator frames per agent step
NOOP_MAX = 30  # at most this many no-op frames start each game
SCREEN_SIZE = 84  # observations are SCREEN_SIZE x SCREEN_SIZE grayscale
FRAME_STACK = 4  # agent steps per observation; the observation's first (channel) axis


def register_ale() -> bool:
    """Register ale_py's environments with gymnasium; False if ale_py is not installed. ALE's
    banner and informational lines go to stderr from C++ on every game made: errors only."""
    try:
        import ale_py
    except ImportError:
        return False
    gym.register_envs(ale_py)
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    return True


def is_atari(env_id: str) -> bool:
    """Whether `env_id` (optionally "module:id", as gym.make accepts) is registered by ale_py.

    Decided by the spec's entry point, so every ALE id counts (ALE/Breakout-v5, BreakoutNoFrameskip-v4)
    and an unknown id is simply not Atari: the caller's own check names it.
    """
    if not register_ale():
        return False
    if ":" in env_id:  # import the module first, as gym.make does, so its registrations count
        module, env_id = env_id.split(":", 1)
        importlib.import_module(module)
    spec = gym.registry.get(env_id)
    if spec is None:
        return False
    entry = spec.entry_point
    module_name = entry.split(":")[0] if isinstance(entry, str) else getattr(entry, "__module__", "")
    return module_name == "ale_py" or module_name.startswith("ale_py.")


def _ale(env: gym.Env) -> Any:
    """The ALE interface of the raw game under `env`'s wrappers."""
    return env.unwrapped.ale  # type: ignore[attr-defined]


class GameEpisodeStatistics(RecordEpisodeStatistics):
    """RecordEpisodeStatistics around the raw game (item 2 above), a class of its own so that
    `reports_game_episodes` can find it. `info["episode"]["l"]` counts emulator frames."""


def reports_game_episodes(env: gym.Env) -> bool:
    """Whether `env` reports each real game in `info["episode"]` (every `make_atari` stack does),
    whose returns are the ones to report (see the module docstring's end)."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, GameEpisodeStatistics):
            return True
        env = env.env
    return False


class EpisodicLife(gym.Wrapper):
    """A lost life ends the agent's episode (terminated); the next reset continues the same game
    (item 4 above). As baselines' EpisodicLifeEnv: a state's value never counts rewards earned after
    losing a life, which speeds learning. Only a game over (or a new seed) resets the game."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._lives = 0
        self._game_over = True

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._game_over = terminated or truncated
        lives = _ale(self.env).lives()
        if 0 < lives < self._lives:  # at 0 lives the game itself is over
            terminated = True
        self._lives = lives
        return obs, reward, terminated, truncated, info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if self._game_over or seed is not None:
            obs, info = self.env.reset(seed=seed, options=options)
        else:
            # One no-op step past the lost life. Should the game end right there (never seen in
            # practice), its info["episode"] is lost with this step's info.
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(options=options)
        self._game_over = False
        self._lives = _ale(self.env).lives()
        return obs, info


class FireReset(gym.Wrapper):
    """Press FIRE, then action 2, after each reset (item 5 above): without it a new policy can
    spend a whole life doing nothing. The two steps' rewards are dropped, as in baselines."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        meanings = env.unwrapped.get_action_meanings()  # type: ignore[attr-defined]
        if len(meanings) < 3 or meanings[1] != "FIRE":
            raise ValueError(f"FireReset needs FIRE as action 1 of at least 3, got {meanings}")

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        for action in (1, 2):
            obs, _, terminated, truncated, _ = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset(options=options)
        return obs, info


def _sign(reward: SupportsFloat) -> float:
    """Reward clipping of DQN: only the sign of a reward is kept, so every game's scale is alike."""
    return float(np.sign(float(reward)))


CONSOLE_HZ = 60  # frames a second of the Atari 2600 (NTSC)


def make_atari(env_id: str, seed: int, *, training: bool, **kwargs: Any) -> gym.Env:
    """The preprocessed Atari game `env_id` (see the module docstring), RNG seeded like make_env.

    Observations are uint8 (4, 84, 84), actions Discrete. `training=True` adds episodic life and
    reward clipping; `training=False` (evaluation) plays whole games with real rewards. `kwargs` go to
    gym.make (e.g. repeat_action_probability=0.0); `frameskip` and `obs_type` are refused: the
    wrappers skip frames and read the screen themselves.
    """
    if "frameskip" in kwargs:
        raise ValueError(
            f"frameskip={kwargs['frameskip']!r} is not allowed for Atari: the preprocessing already "
            f"repeats each action for {FRAME_SKIP} frames (and max-pools the last two)"
        )
    if "obs_type" in kwargs:
        raise ValueError(
            f"obs_type={kwargs['obs_type']!r} is not allowed for Atari: the preprocessing reads the "
            f"screen itself and observes {FRAME_STACK} stacked {SCREEN_SIZE}x{SCREEN_SIZE} grayscale frames"
        )
    make_kwargs: dict[str, Any] = {"disable_env_checker": True, **kwargs}
    env: gym.Env = gym.make(env_id, frameskip=1, obs_type="grayscale", **make_kwargs)
    env = GameEpisodeStatistics(env)
    env = AtariPreprocessing(
        env, noop_max=NOOP_MAX, frame_skip=FRAME_SKIP, screen_size=SCREEN_SIZE, grayscale_obs=True
    )
    if training:
        env = EpisodicLife(env)
    if "FIRE" in env.unwrapped.get_action_meanings():  # type: ignore[attr-defined]
        env = FireReset(env)
    if training:
        env = TransformReward(env, _sign)
    env = FrameStackObservation(env, FRAME_STACK)
    # A step is FRAME_SKIP frames of a 60 Hz console: a video of one frame a step plays in real
    # time at 15 fps (ALE says 30, for its raw game).
    env.metadata = {**env.metadata, "render_fps": CONSOLE_HZ / FRAME_SKIP}
    # Seeding via reset makes every later reset() draw from this seeded generator.
    env.reset(seed=seed)
    env.action_space.seed(seed)
    return env

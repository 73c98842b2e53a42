"""Atari preprocessing: the observations a CNN gets, and which returns and episode ends are the game's.

Random play loses a game of Breakout (5 lives) or Space Invaders (3 lives, rewards 5 to 200) in a
few hundred agent steps, so whole games are cheap enough to play here.
"""

from __future__ import annotations

import sys
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from surreal.runtime.envs.atari import is_atari, make_atari, reports_game_episodes

MAX_STEPS = 5000  # agent steps; a random game takes a few hundred


class FrameTally:
    """Counts every emulator frame and sums its unclipped reward, under all of the stack's wrappers."""

    def __init__(self, env: gym.Env) -> None:
        self.frames, self.reward = 0, 0.0
        raw = env.unwrapped
        self._step = raw.step
        raw.step = self.step  # type: ignore[method-assign]

    def step(self, action: Any) -> Any:
        out = self._step(action)
        self.frames += 1
        self.reward += float(out[1])
        return out


def _lives(env: gym.Env) -> int:
    return int(env.unwrapped.ale.lives())  # type: ignore[attr-defined]


def _play_one_episode(env: gym.Env) -> tuple[list[float], list[bool], list[dict], list[int]]:
    """Random actions until the agent's episode ends (no reset)."""
    rewards, terms, infos, lives = [], [], [], []
    for _ in range(MAX_STEPS):
        _, r, term, trunc, info = env.step(env.action_space.sample())
        rewards.append(float(r))
        terms.append(bool(term))
        infos.append(info)
        lives.append(_lives(env))
        if term or trunc:
            return rewards, terms, infos, lives
    raise AssertionError(f"no episode ended within {MAX_STEPS} agent steps")


def _game_rewards(env: gym.Env) -> list[float]:
    """The agent's rewards over one whole game of random play (resetting after lost lives)."""
    rewards: list[float] = []
    while True:
        r, _, infos, _ = _play_one_episode(env)
        rewards += r
        if "episode" in infos[-1]:
            return rewards
        env.reset()


@pytest.mark.parametrize("training", [True, False])
def test_observations_are_stacked_84x84_uint8_channels_first(training: bool):
    env = make_atari("ALE/Breakout-v5", 0, training=training)
    assert env.observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    assert env.action_space == gym.spaces.Discrete(4)
    obs, _ = env.reset()
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    assert all((obs[i] == obs[0]).all() for i in range(4))  # the stack starts as the reset frame
    for _ in range(3):
        new, *_ = env.step(env.action_space.sample())
        np.testing.assert_array_equal(new[:3], obs[1:])  # the newest frame comes last
        obs = new
    assert obs.max() > obs.min()  # a real screen, not a blank one
    assert env.metadata["render_fps"] == 15  # a video of one frame a step plays in real time


def test_kwargs_reach_the_game_and_frameskip_is_refused():
    env = make_atari("ALE/Breakout-v5", 0, training=True, full_action_space=True)
    assert env.action_space == gym.spaces.Discrete(18)
    with pytest.raises(ValueError, match="frameskip"):
        make_atari("ALE/Breakout-v5", 0, training=True, frameskip=4)
    with pytest.raises(ValueError, match="obs_type"):
        make_atari("ALE/Breakout-v5", 0, training=True, obs_type="ram")


def test_same_seed_same_game():
    a, b = (make_atari("ALE/Breakout-v5", 3, training=True) for _ in range(2))
    for t in range(50):
        action = t % 4
        oa, ra, ta, _, _ = a.step(action)
        ob, rb, tb, _, _ = b.step(action)
        np.testing.assert_array_equal(oa, ob)
        assert (ra, ta) == (rb, tb)


def test_training_clips_rewards_and_evaluation_does_not():
    train_rewards = _game_rewards(make_atari("ALE/SpaceInvaders-v5", 0, training=True))
    eval_rewards = _game_rewards(make_atari("ALE/SpaceInvaders-v5", 0, training=False))
    assert set(train_rewards) == {0.0, 1.0}
    assert max(eval_rewards) >= 5.0  # every Space Invaders alien is worth 5 or more


def test_training_episodes_are_lives_but_info_reports_the_whole_game():
    env = make_atari("ALE/SpaceInvaders-v5", 0, training=True)
    tally = FrameTally(env)
    env.reset(seed=1)  # a new game, every frame of it tallied
    ale = env.unwrapped.ale  # type: ignore[attr-defined]
    assert _lives(env) == 3
    rewards: list[float] = []
    terms: list[bool] = []
    infos: list[dict] = []
    for life in (3, 2, 1):
        r, t, i, lives = _play_one_episode(env)
        rewards, terms, infos = rewards + r, terms + t, infos + i
        assert terms[-1] and lives[-1] == life - 1  # each lost life ended an agent episode
        if life > 1:
            assert "episode" not in infos[-1]
            ended_at = ale.getEpisodeFrameNumber()
            env.reset()
            assert ale.getEpisodeFrameNumber() > ended_at  # the reset continued the game
    assert ["episode" in i for i in infos].count(True) == 1 and "episode" in infos[-1]
    game = infos[-1]["episode"]
    assert game["r"] == tally.reward  # unclipped, including the no-op and FIRE frames of resets
    assert game["l"] == tally.frames  # emulator frames, not agent steps
    assert sum(rewards) < game["r"]  # the agent saw clipped rewards
    assert reports_game_episodes(env)


def test_an_evaluation_episode_is_the_whole_game():
    env = make_atari("ALE/Breakout-v5", 0, training=False)
    tally = FrameTally(env)
    env.reset(seed=2)
    assert _lives(env) == 5
    rewards, terms, infos, lives = _play_one_episode(env)
    assert sum(terms) == 1 and terms[-1]  # lost lives did not end the episode
    assert lives[-1] == 0 and max(lives) == 5
    assert "episode" in infos[-1] and all("episode" not in i for i in infos[:-1])
    assert infos[-1]["episode"]["r"] == tally.reward == sum(rewards)
    assert reports_game_episodes(env)


def test_is_atari(monkeypatch: pytest.MonkeyPatch):
    assert is_atari("ALE/Breakout-v5")
    assert is_atari("BreakoutNoFrameskip-v4")
    assert not is_atari("CartPole-v1")
    assert not is_atari("NoSuchGame-v0")
    monkeypatch.setitem(sys.modules, "ale_py", None)  # as if ale-py were not installed
    assert not is_atari("ALE/Breakout-v5")


def test_only_atari_stacks_report_game_episodes():
    assert not reports_game_episodes(gym.make("CartPole-v1"))
    assert not reports_game_episodes(gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1")))

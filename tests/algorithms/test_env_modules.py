"""The user-module environments of tests/envs that learning tests train on: their spaces, their
determinism, and the gap between a random and the optimal policy that a learning test relies on."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

# tests/envs stands for a user's own folder of environment modules (no package, no __init__.py).
sys.path.insert(0, str(Path(__file__).parents[1] / "envs"))

import line_world  # noqa: E402
import pixel_target  # noqa: E402


def _mean_return(env: gym.Env, policy: Callable[[gym.Env], int], episodes: int, seed: int = 0) -> float:
    """Mean undiscounted return of `policy` (a function of the unwrapped env) over `episodes`."""
    env.reset(seed=seed)
    env.action_space.seed(seed)
    total = 0.0
    for _ in range(episodes):
        env.reset()
        done = False
        while not done:
            _, r, term, trunc, _ = env.step(policy(env.unwrapped))
            total += float(r)
            done = term or trunc
    return total / episodes


def _rollout(env: gym.Env, seed: int, steps: int) -> list[np.ndarray]:
    obs, _ = env.reset(seed=seed)
    seen = [obs]
    for t in range(steps):
        obs, _, term, trunc, _ = env.step(t % env.action_space.n)
        seen.append(obs)
        if term or trunc:
            seen.append(env.reset()[0])  # later episodes draw from the seeded generator too
    return seen


def _random(env: gym.Env) -> int:
    return int(env.action_space.sample())


@pytest.mark.parametrize("name", ["pixel_target:PixelTarget-v0", "PixelTarget-v0"])
def test_pixel_target_is_registered_on_import(name: str):
    env = gym.make(name)
    assert env.spec is not None and env.spec.entry_point == "pixel_target:PixelTarget"
    assert isinstance(env.unwrapped, pixel_target.PixelTarget)


def test_pixel_target_spaces_and_observations():
    env = gym.make("PixelTarget-v0", size=36)
    assert env.observation_space == gym.spaces.Box(0, 255, (1, 36, 36), np.uint8)
    assert env.action_space == gym.spaces.Discrete(4)
    obs, _ = env.reset(seed=0)
    for _ in range(20):
        assert obs in env.observation_space
        assert set(np.unique(obs)) == {0, 255}
        rows, cols = np.nonzero(obs[0])
        assert len(rows) == 9 * 9  # one square, a quarter of the side
        quadrant = 2 * int(rows.min() >= 18) + int(cols.min() >= 18)
        assert quadrant == 2 * int(rows.max() >= 18) + int(cols.max() >= 18)  # inside one quadrant
        assert quadrant == env.unwrapped.quadrant
        obs, *_ = env.step(0)
    with pytest.raises(ValueError, match="size"):
        pixel_target.PixelTarget(size=7)


def test_pixel_target_episodes_are_16_steps_cut_as_truncated():
    env = pixel_target.PixelTarget()
    env.reset(seed=0)
    ends = [env.step(0)[2:4] for _ in range(16)]
    assert ends == [(False, False)] * 15 + [(False, True)]


@pytest.mark.parametrize(("make", "steps"), [(pixel_target.PixelTarget, 30), (line_world.LineWorld, 60)])
def test_the_envs_are_deterministic_under_a_seed(make, steps):
    a, b = _rollout(make(), 5, steps), _rollout(make(), 5, steps)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, _rollout(make(), 6, steps))


def test_pixel_target_random_scores_a_quarter_and_optimal_all():
    env = pixel_target.PixelTarget()
    assert _mean_return(env, _random, 500) == pytest.approx(4.0, abs=0.4)
    assert _mean_return(env, lambda e: e.quadrant, 20) == 16.0


@pytest.mark.parametrize("name", ["line_world:LineWorld-v0", "LineWorld-v0"])
def test_line_world_is_registered_on_import(name: str):
    env = gym.make(name)
    assert env.spec is not None and env.spec.entry_point == "line_world:LineWorld"


def test_line_world_spaces_and_size_kwarg():
    env = gym.make("LineWorld-v0", size=5)
    assert env.observation_space == gym.spaces.Box(0.0, 1.0, (2,), np.float32)
    assert env.action_space == gym.spaces.Discrete(3)
    obs, _ = env.reset(seed=0)
    for t in range(50):
        assert obs in env.observation_space
        np.testing.assert_allclose(obs * 4, np.round(obs * 4), atol=1e-6)  # cells of a line of 5
        assert obs[0] != obs[1]  # the target is never under the agent
        obs, _, term, trunc, _ = env.step(t % 3)
        assert not term and trunc == (t == 49)
    with pytest.raises(ValueError, match="size"):
        line_world.LineWorld(size=1)


def test_line_world_random_is_far_below_optimal():
    """The returns the module docstring states: random 1.27, optimal 13.45 (size 10)."""
    env = line_world.LineWorld()
    assert _mean_return(env, _random, 500) == pytest.approx(1.27, abs=0.3)
    assert _mean_return(env, lambda e: e.optimal_action(), 500) == pytest.approx(13.45, abs=0.5)

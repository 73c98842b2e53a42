"""EnvBatch: autoreset, truncation bookkeeping, finished-episode statistics."""

from __future__ import annotations

import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

from surreal.runtime.envs.make import EnvBatch, make_env, spaces_for
from surreal.runtime.envs.ref import resolve


class Countdown(gym.Env):
    """obs = [steps taken]; reward = steps taken after the step; action 1 terminates."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float64)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0]), {}

    def step(self, action):
        self.t += 1
        return np.array([float(self.t)]), float(self.t), bool(action == 1), False, {}


gym.register("SurrealTestCountdown-v0", entry_point=Countdown, max_episode_steps=3)


def test_resolve_names_the_unknown_env():
    resolve("CartPole-v1")
    with pytest.raises(ValueError, match="unknown environment 'CartPole-v99'"):
        resolve("CartPole-v99")
    with pytest.raises(ValueError, match="did you mean"):
        resolve("CartPol-v1")


def test_make_env_keeps_the_time_limit_and_seeds():
    a, b = make_env("CartPole-v1", 3), make_env("CartPole-v1", 3)
    assert a.spec.max_episode_steps == 500
    np.testing.assert_array_equal(a.reset()[0], b.reset()[0])


def test_spaces():
    cp = spaces_for("CartPole-v1")
    assert (cp.obs_dim, cp.discrete, cp.action_dim) == (4, True, 2)
    pend = spaces_for("Pendulum-v1")
    assert (pend.obs_dim, pend.discrete, pend.action_dim) == (3, False, 1)
    np.testing.assert_array_equal(pend.action_high, [2.0])


def test_autoreset_truncation_and_termination_bookkeeping():
    envs = EnvBatch("SurrealTestCountdown-v0", 2, seed=0)
    obs = envs.reset()
    np.testing.assert_array_equal(obs, [[0.0], [0.0]])
    assert obs.dtype == np.float32

    res = envs.step(np.array([0, 0]))
    np.testing.assert_array_equal(res.obs, [[1.0], [1.0]])
    assert not res.terminated.any() and not res.truncated.any() and res.episode_returns == []

    res = envs.step(np.array([0, 1]))  # env 1 terminates after 2 steps (return 1 + 2)
    np.testing.assert_array_equal(res.terminated, [False, True])
    np.testing.assert_array_equal(res.truncated, [False, False])
    np.testing.assert_array_equal(res.obs, [[2.0], [0.0]])  # env 1 was reset
    assert (res.episode_returns, res.episode_lengths) == ([3.0], [2])
    assert res.trunc_envs == []

    res = envs.step(np.array([0, 0]))  # env 0 hits the 3-step limit (return 1 + 2 + 3)
    np.testing.assert_array_equal(res.truncated, [True, False])
    np.testing.assert_array_equal(res.terminated, [False, False])
    assert res.trunc_envs == [0]
    np.testing.assert_array_equal(res.trunc_obs[0], [3.0])  # the final observation
    np.testing.assert_array_equal(res.obs, [[0.0], [1.0]])
    np.testing.assert_array_equal(res.rewards, [3.0, 1.0])
    assert (res.episode_returns, res.episode_lengths) == ([6.0], [3])


def test_termination_on_the_time_limit_step_counts_as_termination():
    envs = EnvBatch("SurrealTestCountdown-v0", 1, seed=0)
    envs.reset()
    envs.step(np.array([0]))
    envs.step(np.array([0]))
    res = envs.step(np.array([1]))  # terminated and truncated at once: no bootstrap
    assert res.terminated[0] and not res.truncated[0] and res.trunc_envs == []


def test_box_actions_are_clipped_for_the_env_only():
    envs = EnvBatch("Pendulum-v1", 1, seed=0)
    envs.reset()
    actions = np.array([[100.0]], np.float32)
    res = envs.step(actions)
    assert actions[0, 0] == 100.0  # the caller's (unclipped) sample is untouched
    # Pendulum's reward penalizes 0.001 * u^2; with u clipped to 2 the penalty is at most 0.004
    # plus the angle terms (< 16.3), far from the 10.0 an unclipped u = 100 would add.
    assert res.rewards[0] > -16.3 - 0.004 - 1e-3


def test_env_batch_seeds_are_distinct_and_reproducible():
    a = EnvBatch("CartPole-v1", 3, seed=5).reset()
    b = EnvBatch("CartPole-v1", 3, seed=5).reset()
    np.testing.assert_array_equal(a, b)
    assert len({tuple(row) for row in a}) == 3


class Unstable(Countdown):
    """Countdown whose third step returns NaN (action 0) or an infinite reward (action 1)."""

    def step(self, action):
        self.t += 1
        if self.t == 3:
            bad = np.array([np.nan]) if action == 0 else np.array([3.0])
            return bad, (3.0 if action == 0 else float("inf")), False, False, {}
        return np.array([float(self.t)]), 1.0, False, False, {}


gym.register("SurrealTestUnstable-v0", entry_point=Unstable, max_episode_steps=10)


def test_a_non_finite_step_ends_that_episode_and_never_leaves_the_batch(caplog):
    batch = EnvBatch("SurrealTestUnstable-v0", 3, seed=0)
    batch.reset()
    for _ in range(2):
        res = batch.step(np.array([0, 1, 0]))
        assert not res.terminated.any()
    res = batch.step(np.array([0, 1, 0]))  # every env breaks at its third step
    assert np.isfinite(res.obs).all() and np.isfinite(res.rewards).all()
    np.testing.assert_array_equal(res.obs[:, 0], [0.0, 0.0, 0.0])  # reset observations
    np.testing.assert_array_equal(res.rewards, [0.0, 0.0, 0.0])
    assert res.terminated.all() and not res.truncated.any() and res.trunc_envs == []
    assert res.episode_returns == [2.0, 2.0, 2.0] and res.episode_lengths == [3, 3, 3]
    assert batch.broken_episodes == 3
    res = batch.step(np.array([0, 0, 0]))  # the batch goes on from the reset
    np.testing.assert_array_equal(res.obs[:, 0], [1.0, 1.0, 1.0])
    # Logged once, not once per broken episode.
    assert sum("non-finite observation or reward" in r.getMessage() for r in caplog.records) == 1


def test_mujoco_warnings_are_logged_once_and_no_file_is_written(tmp_path):
    """HalfCheetah-v5's model warns when it is compiled: MuJoCo's own handler printed that for every
    env and appended it to MUJOCO_LOG.TXT in the working directory (read-only in a pod)."""
    code = (
        "import logging; logging.basicConfig()\n"
        "from surreal.runtime.envs.make import make_env\n"
        "for i in range(4): make_env('HalfCheetah-v5', i).close()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, check=True)  # fmt: skip
    text = out.stdout + out.stderr
    assert text.count("settotalmass") == 1, text
    assert "logged once per process" in text
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()


def test_mujoco_renders_off_screen_without_a_display(tmp_path):
    """On a machine without a display gymnasium tried GLFW first and failed at the first frame
    (`surreal record` on HalfCheetah); surreal chooses EGL there unless MUJOCO_GL says otherwise."""
    code = (
        "import os\n"
        "from surreal.runtime.envs.make import make_env\n"
        "env = make_env('CartPole-v1', 0)\n"
        "assert 'MUJOCO_GL' not in os.environ  # only an environment made to render\n"
        "env = make_env('HalfCheetah-v5', 0)\n"
        "assert 'MUJOCO_GL' not in os.environ\n"
        "from surreal.runtime.envs.ref import EnvRef\n"
        "kwargs = {'render_mode': 'rgb_array', 'width': 64, 'height': 48}\n"
        "env = make_env(EnvRef('HalfCheetah-v5', kwargs), 0)\n"
        "print(os.environ['MUJOCO_GL'], env.render().shape)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL")}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env,
                         timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["egl", "(48,", "64,", "3)"], out.stdout

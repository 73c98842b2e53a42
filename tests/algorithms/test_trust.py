"""What the PPO learner refuses to train on, and what it does when training still goes non-finite."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from surreal.algorithms.ppo import PPO
from surreal.algorithms.ppo.presets import preset_for
from surreal.protocol.types import Fragment
from surreal.runtime.envs.make import spaces_for
from surreal.runtime.normalization import Moments, RunningMeanStd, batch_moments
from surreal.runtime.onpolicy.actor import Actor
from surreal.runtime.onpolicy.batch import TENSORS
from surreal.runtime.onpolicy.fragment import REJECT_REASONS, check_fragment
from surreal.runtime.onpolicy.learner import Learner

SMALL = dict(envs_per_agent=2, fragment_length=16, steps_per_update=64, minibatch_size=32, epochs=2)
PENDULUM = dataclasses.replace(preset_for("Pendulum-v1"), **SMALL)  # Box actions, both normalizations
CARTPOLE = dataclasses.replace(preset_for("CartPole-v1"), **SMALL)  # Discrete, no normalization


def make(env_id: str, cfg, total_steps: int = 10_000):
    learner = Learner(PPO(), cfg, spaces_for(env_id), total_steps, seed=1)
    actor = Actor(cfg, env_id, num_envs=2, seed=3)
    actor.set_params(learner.params())
    return learner, actor


def poisoned(tensors: dict[str, np.ndarray], name: str, value) -> dict[str, np.ndarray]:
    out = {k: np.array(v) for k, v in tensors.items()}
    out[name] = np.full_like(out[name], value) if np.isscalar(value) else np.asarray(value, out[name].dtype)
    return out


CASES = [
    # (env, field, value, reason)
    ("Pendulum-v1", "obs", np.nan, "non_finite"),
    ("Pendulum-v1", "logprobs", np.nan, "non_finite"),
    ("Pendulum-v1", "actions", np.inf, "non_finite"),
    ("Pendulum-v1", "rewards", -np.inf, "non_finite"),
    ("Pendulum-v1", "obs_mean", np.nan, "non_finite"),
    ("Pendulum-v1", "rewards", 3e38, "out_of_range"),
    ("Pendulum-v1", "obs", 11.0, "out_of_range"),  # normalized observations are clipped at 10
    ("Pendulum-v1", "obs_count", -5.0, "bad_moments"),
    ("Pendulum-v1", "obs_count", 31.0, "bad_moments"),  # T x N is 32
    ("Pendulum-v1", "ret_count", 1e9, "bad_moments"),
    ("Pendulum-v1", "obs_m2", -1.0, "bad_moments"),
    ("Pendulum-v1", "ret_mean", 1e12, "bad_moments"),  # beyond max_abs_reward / (1 - gamma)
    ("CartPole-v1", "actions", 2, "bad_action"),
    ("CartPole-v1", "actions", -1, "bad_action"),
    ("CartPole-v1", "obs", np.nan, "non_finite"),
    ("CartPole-v1", "rewards", 3e38, "out_of_range"),
    ("CartPole-v1", "obs_count", 32.0, "bad_moments"),  # CartPole's preset normalizes nothing
]


@pytest.mark.parametrize(("env_id", "name", "value", "reason"), CASES)
def test_a_poisoned_fragment_is_rejected_whole_for_its_reason(env_id, name, value, reason):
    cfg = PENDULUM if env_id == "Pendulum-v1" else CARTPOLE
    learner, actor = make(env_id, cfg)
    tensors = actor.collect()
    assert check_fragment(tensors, actor.spaces, cfg) is None
    bad = poisoned(tensors, name, value)
    rejection = check_fragment(bad, actor.spaces, cfg)
    assert rejection is not None and rejection.reason == reason, rejection
    before = (learner.obs_rms.count, learner.ret_rms.count)
    assert not learner.add_fragment(Fragment("rogue", 0, bad))
    c = learner.counters
    assert c.rejected[reason] == 1 and sum(c.rejected.values()) == 1
    # Rejected fragments neither count steps nor touch the statistics.
    assert (c.env_steps, c.episodes, learner.intake.steps) == (0, 0, 0)
    assert (learner.obs_rms.count, learner.ret_rms.count) == before
    assert learner.status()["rejected_fragments"][reason] == 1


def test_inconsistent_episode_and_step_flags_are_rejected():
    learner, actor = make("Pendulum-v1", PENDULUM)
    tensors = actor.collect()
    lengths = poisoned(tensors, "episode_lengths", [0])
    lengths["episode_returns"] = np.array([-1.0])
    assert check_fragment(lengths, actor.spaces, PENDULUM).reason == "out_of_range"
    both = poisoned(tensors, "terminated", False)
    both["terminated"][0, 0] = both["truncated"][0, 0] = True
    both["trunc_index"], both["trunc_obs"] = np.array([[0, 0]]), tensors["obs"][1, :1]
    assert check_fragment(both, actor.spaces, PENDULUM).reason == "malformed"
    both["terminated"][0, 0] = False
    assert check_fragment(both, actor.spaces, PENDULUM) is None
    assert set(REJECT_REASONS) == set(learner.counters.rejected)


def test_targets_that_overflow_reject_their_fragment_and_the_rest_trains():
    learner, actor = make("CartPole-v1", CARTPOLE)
    good = [actor.collect() for _ in range(2)]
    overflowing = poisoned(good[0], "obs", 100.0)  # finite, and CartPole's preset does not normalize
    learner.net.value = lambda obs: torch.exp(obs[:, 0])  # exp(100) overflows float32
    batch, lags = learner._prepare([(overflowing, 0, "rogue"), (good[1], 0, "actor-0")])
    assert learner.counters.rejected["non_finite_targets"] == 1
    assert lags == [0] and len(batch.obs) == batch.group_rows == 32
    assert all(torch.isfinite(getattr(batch, f.name).float()).all() for f in TENSORS)


def test_a_non_finite_loss_skips_the_update_and_keeps_weights_and_optimizer_state():
    learner, actor = make("Pendulum-v1", PENDULUM)
    for _ in range(2):
        learner.add_fragment(Fragment("actor-0", 0, actor.collect()))
    assert learner.update()  # one good update: the optimizer has state to keep
    for _ in range(2):
        learner.add_fragment(Fragment("actor-0", learner.counters.version, actor.collect()))
    weights = {k: v.clone() for k, v in learner.net.state_dict().items()}
    adam = {k: v.clone() for k, v in learner.optimizer.state_dict()["state"][0].items()}
    version, updates = learner.counters.version, learner.counters.updates
    original = learner.net.evaluate

    def nan_in_second_minibatch(obs, actions, calls=[0]):  # noqa: B006 (a call counter)
        calls[0] += 1
        logp, entropy, values = original(obs, actions)
        return (logp * float("nan") if calls[0] == 2 else logp), entropy, values

    learner.net.evaluate = nan_in_second_minibatch
    assert learner.update() == {}
    c = learner.counters
    assert (c.skipped_updates, c.version, c.updates) == (1, version, updates)
    for k, v in learner.net.state_dict().items():
        assert torch.equal(v, weights[k]), k  # the first minibatch's step was undone too
    for k, v in learner.optimizer.state_dict()["state"][0].items():
        assert torch.equal(v, adam[k]), k
    learner.net.evaluate = original
    for _ in range(2):
        learner.add_fragment(Fragment("actor-0", learner.counters.version, actor.collect()))
    assert learner.update() and learner.counters.version == version + 1  # training goes on


@pytest.mark.parametrize(
    "bad",
    [
        Moments(float("nan"), np.zeros(2), np.zeros(2)),
        Moments(-3.0, np.zeros(2), np.zeros(2)),
        Moments(5.0, np.array([np.inf, 0.0]), np.zeros(2)),
        Moments(5.0, np.zeros(2), np.array([-1.0, 0.0])),
        Moments(5.0, np.array([1e300, 0.0]), np.array([1e300, 0.0])),  # the merge overflows
    ],
)
def test_normalization_statistics_never_become_non_finite(bad):
    rms = RunningMeanStd((2,))
    rms.merge(batch_moments(np.array([[1.0, 2.0], [3.0, 4.0]])))
    before = rms.moments
    assert not rms.merge(bad)
    assert rms.moments is before
    assert np.isfinite(rms.mean).all() and np.isfinite(rms.var).all()

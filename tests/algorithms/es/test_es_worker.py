"""ES policies and the worker core: what a result row claims is what the policy really scored."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np

from surreal.runtime.envs.make import make_env, spaces_for
from surreal.runtime.es.actor import ESWorker, agent_ids
from surreal.runtime.es.config import ESConfig
from surreal.runtime.es.evaluator import deterministic_policy, normalizer
from surreal.runtime.es.master import ESMaster
from surreal.runtime.es.networks import BatchPolicy, Policy, PolicySpec, init_params, unflatten
from surreal.runtime.es.noise import env_seed, perturbation

CFG = ESConfig(policy="mlp", hidden_sizes=(8,), population=4, handout_ratio=1.0, sigma=0.5)


def test_linear_policy_by_hand():
    spec = PolicySpec(obs_dim=2, action_dim=2, discrete=True, hidden_sizes=(), activation="tanh")
    flat = np.array([1, 2, 3, 4, 0.5, -0.5], np.float32)  # W = [[1, 2], [3, 4]], b = [0.5, -0.5]
    assert spec.num_params == 6
    obs = np.array([[1.0, 1.0], [1.0, -1.0]], np.float32)  # outputs [3.5, 6.5] and [-0.5, -1.5]
    assert Policy(spec, flat).act(obs).tolist() == [1, 0]
    box = dataclasses.replace(spec, discrete=False, action_low=np.full(2, -1.0, np.float32),
                              action_high=np.full(2, 1.0, np.float32))  # fmt: skip
    np.testing.assert_allclose(Policy(box, flat).act(obs), [[1, 1], [-0.5, -1]])


def test_batch_policy_runs_each_slot_with_its_own_parameters():
    spec = PolicySpec.from_config(CFG, spaces_for("Pendulum-v1"))
    batch = BatchPolicy(spec, 3)
    flats = [init_params(spec, s) + np.float32(0.1 * s) for s in range(3)]
    for i, flat in enumerate(flats):
        batch.set(i, flat)
    obs = np.random.default_rng(0).standard_normal((3, spec.obs_dim)).astype(np.float32)
    one_by_one = np.concatenate([Policy(spec, f).act(obs[i : i + 1]) for i, f in enumerate(flats)])
    np.testing.assert_allclose(batch.act(obs), one_by_one, rtol=1e-5)
    np.testing.assert_allclose(batch.act(obs[[0, 2]], np.array([0, 2])), one_by_one[[0, 2]], rtol=1e-5)


def test_mlp_init_scales_rows_and_unflatten_views_write_through():
    spec = PolicySpec.from_config(CFG, spaces_for("CartPole-v1"))
    flat = init_params(spec, 0)
    (w1, b1), (w2, b2) = unflatten(spec, flat)
    np.testing.assert_allclose(np.linalg.norm(w1, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(w2, axis=1), 0.01, rtol=1e-5)
    assert not b1.any() and not b2.any()
    b2[:] = 7
    assert flat[-2:].tolist() == [7, 7]


def test_worker_results_are_accepted_and_are_the_true_returns_of_the_perturbed_policies():
    spaces = spaces_for("CartPole-v1")
    master = ESMaster(CFG, spaces, total_steps=10**9, num_agents=2, seed=5)
    ids = agent_ids(3, 2)
    worker = ESWorker(CFG, "CartPole-v1", ids, seed=0)
    params = master.params()
    worker.set_params(params)
    while worker.start_idle() or worker.busy:
        worker.step()
    batch = worker.take_batch()
    assert batch is not None and worker.take_batch() is None
    assert sorted(batch["agent_id"].tolist()) == sorted(ids * 2)  # 2 pairs each (4 / 2 agents)
    assert master.add_results(batch) == 4 and master.status()["agents_reporting"] == 2
    assert batch["obs_count"][0] == batch["lengths"].sum()
    # Replay one pair by hand: same seed -> same perturbation and start state -> same returns.
    spec, theta = worker.spec, params.weights["theta"]
    seed, norm = int(batch["seed"][0]), normalizer(CFG, params)
    for sign, col in ((1, 0), (-1, 1)):
        policy = Policy(spec, theta + sign * CFG.sigma * perturbation(seed, spec.num_params))
        env = make_env("CartPole-v1", 0)
        obs, total, steps, done = env.reset(seed=env_seed(seed))[0], 0.0, 0, False
        while not done:
            x = norm(obs[None]) if norm is not None else obs[None]
            obs, r, term, trunc, _ = env.step(int(policy.act(x)[0]))
            total, steps, done = total + r, steps + 1, term or trunc
        assert (total, steps) == (batch["returns"][0, col], batch["lengths"][0, col])
    worker.close()


def test_agent_ids_are_unique_across_workers():
    ids = agent_ids(0, 3) + agent_ids(1, 3) + agent_ids(2**31 - 1, 2)
    assert len(set(ids)) == 8 and max(ids) < 2**63


def test_the_evaluator_policy_is_the_unperturbed_parameters():
    spaces = spaces_for("CartPole-v1")
    master = ESMaster(CFG, spaces, total_steps=100, num_agents=1, seed=1)
    params = master.params()
    obs = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    expected = Policy(PolicySpec.from_config(CFG, spaces), params.weights["theta"]).act(obs)
    np.testing.assert_array_equal(deterministic_policy(CFG, spaces, params)(obs), expected)


class _Blows(gym.Env):
    """CartPole-like spaces; the observation turns NaN at the 3rd step of an episode whose first
    action is 1, so which episodes break depends on the perturbed policy."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.first = 0, None
        return np.full(4, 0.1, np.float32), {}

    def step(self, action):
        self.t += 1
        self.first = action if self.first is None else self.first
        obs = np.full(4, np.nan if (self.t == 3 and self.first == 1) else 0.1 * self.t, np.float32)
        return obs, 1.0, False, self.t >= 5, {}


gym.register("SurrealTestBlows-v0", entry_point=_Blows)


def test_a_pair_whose_environment_goes_non_finite_is_dropped_and_the_rest_is_accepted():
    cfg = dataclasses.replace(CFG, population=16)
    spaces = spaces_for("SurrealTestBlows-v0")
    master = ESMaster(cfg, spaces, total_steps=10**9, num_agents=4, seed=5)
    worker = ESWorker(cfg, "SurrealTestBlows-v0", agent_ids(0, 4), seed=0)
    worker.set_params(master.params())
    while worker.start_idle() or worker.busy:
        worker.step()
    batch = worker.take_batch()
    handed_out = 4 * cfg.pairs_per_agent(4)
    assert worker.broken_pairs > 0 and batch is not None
    assert len(batch["agent_id"]) + worker.broken_pairs == handed_out
    assert np.isfinite(batch["returns"]).all() and np.isfinite(batch["obs_mean"]).all()
    assert batch["obs_count"][0] == batch["lengths"].sum()  # the dropped pairs' steps are not in it
    assert master.add_results(batch) == len(batch["agent_id"]) and not any(
        master.status()["results_rejected"].values()
    )
    worker.close()

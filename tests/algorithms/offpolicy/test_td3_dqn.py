"""TD3 and DQN on the off-policy API (each refusing the other's actions at create is in
tests/surreal/test_cli_errors.py): the numpy policy the actors run is the learner's network; DQN
takes Discrete actions through the replay, a CNN for images; an algorithm's own state (its count of
updates, a coefficient it adapts) is in its checkpoint; the shard refuses an index outside the
Discrete."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from surreal.algorithms.dqn import DQN, DQNConfig, EpsilonGreedy
from surreal.algorithms.td3 import TD3, NoisyPolicy, TD3Config
from surreal.protocol.types import Params
from surreal.runtime.envs.make import spaces_for
from surreal.runtime.envs.ref import EnvRef, extend_import_path
from surreal.runtime.exits import EXIT_ALGORITHM_FAILED
from surreal.runtime.offpolicy import obs
from surreal.runtime.offpolicy.actor import Actor
from surreal.runtime.offpolicy.replay import Rows
from surreal.runtime.offpolicy.shard import fields, rows_problem
from surreal.runtime.run import RoleFailed, progress_extras

extend_import_path([str(Path(__file__).resolve().parents[2] / "envs")])
CUE = EnvRef("cue_world:CueWorld-v0", {"note": False})  # a Dict with a 3x6x6 frame, Discrete(4)


def _weights(module: torch.nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy() for k, v in module.state_dict().items()}


def test_dqn_acts_greedily_on_its_q_network_and_explores_by_the_run_s_progress() -> None:
    cfg, sp = DQNConfig(hidden_sizes=(16, 16)), spaces_for("CartPole-v1")
    nets = DQN().make(cfg, sp)
    policy = DQN().policy(cfg, sp, _weights(nets.actor), np.random.default_rng(0))
    assert isinstance(policy, EpsilonGreedy)
    rows = np.random.default_rng(1).standard_normal((256, 4)).astype(np.float32)
    greedy = nets.actor(torch.from_numpy(rows)).argmax(1).numpy()
    assert np.array_equal(policy.act(rows, deterministic=True), greedy)
    # epsilon: 1 at the start, the final value once exploration_fraction of the run is done
    assert policy.epsilon(0.0) == 1.0 and policy.epsilon(0.05) == pytest.approx(0.525)
    assert policy.epsilon(0.1) == pytest.approx(cfg.exploration_final_eps) == policy.epsilon(0.9)
    late = np.mean([np.array_equal(policy.act(rows, False, 1.0), greedy) for _ in range(20)])
    early = policy.act(rows, False, 0.0)
    assert late < 1.0 and np.mean(early == greedy) < 0.75  # uniform at the start: about half agree
    assert early.dtype == np.int64 and set(np.unique(early)) <= {0, 1}


def test_td3_acts_as_its_actor_network_with_clipped_noise() -> None:
    cfg, sp = TD3Config(hidden_sizes=(16, 16), exploration_noise=0.5), spaces_for("Pendulum-v1")
    nets = TD3().make(cfg, sp)
    policy = TD3().policy(cfg, sp, _weights(nets.actor), np.random.default_rng(0))
    assert isinstance(policy, NoisyPolicy)
    rows = np.random.default_rng(1).standard_normal((64, 3)).astype(np.float32)
    with torch.no_grad():
        expected = nets.actor(torch.from_numpy(rows)).numpy()
    np.testing.assert_allclose(policy.act(rows, deterministic=True), expected, atol=1e-5)
    noisy = policy.act(rows)
    assert np.abs(noisy).max() <= 1.0 and not np.allclose(noisy, expected)


def _train(algo: DQN | TD3, cfg: object, env: object, updates: int) -> torch.nn.Module:
    """`updates` updates on rows an actor collected (the replay's dtypes): the learner's path."""
    sp = spaces_for(env)
    actor = Actor(algo, cfg, env, num_envs=2, seed=0, random_steps=10**9, total_steps=1_000)
    rows = Rows(fields(sp), 256)
    for _ in range(4):
        tensors = actor.collect()
        assert rows_problem(sp, tensors, 1e6) is None
        rows.add({k: tensors[k] for k in rows.data})
    actor.close()
    nets = algo.make(cfg, sp)
    rng = np.random.default_rng(0)
    for _ in range(updates):
        batch = {k: torch.from_numpy(v) for k, v in obs.batch(sp, rows.sample(8, rng)).items()}
        stats = algo.update(nets, batch, cfg)
        assert all(torch.isfinite(torch.as_tensor(v)) for v in stats.values())
    return nets


def test_dqn_learns_from_discrete_rows_through_a_cnn_and_its_target_follows_its_schedule() -> None:
    cfg = DQNConfig(hidden_sizes=(16,), batch_size=8, target_update_interval=3, fragment_length=8)
    sp = spaces_for(CUE)
    assert fields(sp)["actions"] == (np.dtype(np.int64), ())
    nets = _train(DQN(), cfg, CUE, updates=4)
    assert any(k.startswith("actor.encoder.") for k in nets.state_dict())  # the image's CNN
    assert int(nets.updates) == 4
    # copied at update 3, trained once since: the target is not the online network, nor far from it
    assert not torch.equal(nets.target.q.weight, nets.actor.q.weight)
    state = nets.state_dict()
    again = DQN().make(cfg, sp)
    again.load_state_dict(state)  # a restart: the count, and so the target's schedule, comes back
    assert int(again.updates) == 4


def test_td3_delays_its_actor_and_keeps_its_phase_in_its_checkpoint() -> None:
    cfg = TD3Config(hidden_sizes=(16,), batch_size=8, policy_delay=2, fragment_length=8)
    env = "Pendulum-v1"
    torch.manual_seed(0)
    nets = _train(TD3(), cfg, env, updates=1)
    before = nets.actor.mu.weight.detach().clone()
    assert int(nets.updates) == 1  # one critic update: the actor waits for the second
    sp = spaces_for(env)
    rows = {k: torch.from_numpy(v) for k, v in obs.batch(sp, {
        **{n: np.zeros((8, *s), d) for n, (d, s) in fields(sp).items()}}).items()}  # fmt: skip
    stats = TD3().update(nets, rows, cfg)
    assert "actor_loss" in stats and not torch.equal(before, nets.actor.mu.weight)
    again = TD3().make(cfg, sp)
    again.load_state_dict(nets.state_dict())
    assert int(again.updates) == 2


def test_a_shard_refuses_an_index_outside_the_discrete() -> None:
    sp = spaces_for("CartPole-v1")
    rows = {n: np.zeros((4, *s), d) for n, (d, s) in fields(sp).items()}
    assert rows_problem(sp, rows, 1e6) is None
    for bad in (2, -1):
        rows["actions"][1] = bad
        assert "outside the Discrete's 0..1" in str(rows_problem(sp, rows, 1e6))


def test_an_algorithm_s_own_network_and_coefficient_survive_a_learner_restart(tmp_path: Path) -> None:
    """examples/ln_dqn.py: a LayerNorm Q network the actors run in torch, and td_scale, the
    coefficient it adapts. A learner that trained and checkpointed, then a new learner on the same
    folder (what a SIGKILLed learner's replacement is): the same td_scale, update count and weights."""
    extend_import_path([str(Path(__file__).resolve().parents[3])])
    from test_learner_tensorboard import FakeShards

    from examples.ln_dqn import LayerNormDQN
    from surreal.runtime.offpolicy.learner import Learner
    from surreal.runtime.run import RunContext

    algo = LayerNormDQN()
    cfg = algo.Config(hidden_sizes=(16,), batch_size=8, learning_starts=8, target_update_interval=2)
    ctx = RunContext("CartPole-v1", 0, 10**9, 1, tmp_path, "127.0.0.1:1", "t")
    learner = Learner(algo, cfg, ctx, None)
    learner.shards = shards = FakeShards()  # type: ignore[assignment]
    rng = np.random.default_rng(0)
    for _ in range(5):
        shards.batches.put({n: (rng.integers(0, 2, (8, *s)) if n == "actions" else rng.normal(size=(8, *s)))
                            .astype(d) for n, (d, s) in fields(learner.spaces).items()})  # fmt: skip
        assert learner.ready()
        learner.update()
        learner.params()
    learner.save()
    adapted = float(learner.nets.td_scale)
    assert adapted != 1.0 and int(learner.nets.updates) == 5
    policy = algo.policy(cfg, learner.spaces, learner.params().weights, rng)  # the actors' torch path
    assert policy.act(rng.standard_normal((3, 4)).astype(np.float32), True).dtype == np.int64
    weights = {k: v.clone() for k, v in learner.nets.state_dict().items()}
    learner.close()

    again = Learner(algo, cfg, ctx, None)  # restores the checkpoint
    assert float(again.nets.td_scale) == adapted and int(again.nets.updates) == 5
    assert all(torch.equal(v, weights[k]) for k, v in again.nets.state_dict().items())
    again.close()


class WrongActions(DQN):
    """A policy whose actions are not the replay's: float scores instead of indices."""

    def policy(self, cfg: Any, spaces: Any, weights: Any, rng: Any) -> Any:
        return SimpleNamespace(act=lambda rows, deterministic=False, progress=0.0: np.zeros((len(rows), 2)))


class Raising(DQN):
    def policy(self, cfg: Any, spaces: Any, weights: Any, rng: Any) -> Any:
        raise KeyError("q.weight")


@pytest.mark.parametrize(("algo", "line"), [
    (WrongActions(), "its policy act returned float64[2, 2] for 2 observations: int64[2] is expected"),
    (Raising(), "its policy raised KeyError: 'q.weight'"),
])  # fmt: skip
def test_a_policy_that_raises_or_acts_wrongly_fails_the_role_as_the_algorithm_s(algo: DQN, line: str) -> None:
    cfg, sp = DQNConfig(hidden_sizes=(8,), fragment_length=2), spaces_for("CartPole-v1")
    actor = Actor(algo, cfg, "CartPole-v1", num_envs=2, seed=0, random_steps=0, total_steps=100)
    weights = _weights(DQN().make(cfg, sp).actor)
    with pytest.raises(RoleFailed, match=re.escape(line)) as failed:
        actor.set_params(Params(0, weights, progress_extras(0, False)))
        actor.collect()
    assert failed.value.code == EXIT_ALGORITHM_FAILED
    actor.close()

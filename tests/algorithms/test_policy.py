"""The actors' numpy policy samples what the learner's torch ActorCritic assumes it sampled."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from surreal.runtime.envs.make import EnvSpaces
from surreal.runtime.onpolicy.networks import ActorCritic
from surreal.runtime.onpolicy.policy import NumpyPolicy, policy_layers

DISCRETE = EnvSpaces(obs_dim=5, discrete=True, action_dim=3, action_low=None, action_high=None)
BOX = EnvSpaces(5, False, 2, np.full(2, -1.0, np.float32), np.full(2, 1.0, np.float32))


def published(net: ActorCritic) -> dict[str, np.ndarray]:
    """The weights as they reach an actor: decoded wire buffers are read-only."""
    weights = {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}
    for w in weights.values():
        w.flags.writeable = False
    return weights


@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_gaussian_samples_have_the_log_probs_the_learner_computes(activation):
    torch.manual_seed(0)
    net = ActorCritic(BOX, (16, 16), activation=activation, log_std_init=-0.7, ortho_init=False)
    policy = NumpyPolicy(published(net), BOX, activation, np.random.default_rng(0))
    obs = np.random.default_rng(1).standard_normal((256, 5)).astype(np.float32)
    actions, logp = policy.act(obs)
    assert actions.dtype == np.float32 and logp.dtype == np.float32 and logp.shape == (256,)
    learner_logp, _, _ = net.evaluate(torch.from_numpy(obs), torch.from_numpy(actions))
    np.testing.assert_allclose(logp, learner_logp.detach().numpy(), atol=1e-4)
    mode, _ = policy.act(obs, deterministic=True)
    np.testing.assert_allclose(mode, net.policy(torch.from_numpy(obs)).detach().numpy(), atol=1e-5)


def test_gaussian_samples_are_unclipped_with_the_policy_std():
    net = ActorCritic(BOX, (16,), log_std_init=0.5)
    policy = NumpyPolicy(published(net), BOX, "tanh", np.random.default_rng(0))
    actions, _ = policy.act(np.zeros((20_000, 5), np.float32))
    assert np.abs(actions).max() > 1.0  # bounds are applied by the env batch, not here
    np.testing.assert_allclose(actions.std(0), np.exp(0.5), rtol=0.05)


def test_categorical_samples_follow_the_softmax_and_match_the_learner():
    torch.manual_seed(0)
    net = ActorCritic(DISCRETE, (16,), ortho_init=False)
    with torch.no_grad():
        net.policy[-1].bias.copy_(torch.tensor([1.0, 0.0, -1.0]))  # distinct probabilities
        net.policy[-1].weight.mul_(0.0)  # the same for every observation
    policy = NumpyPolicy(published(net), DISCRETE, "tanh", np.random.default_rng(0))
    obs = np.random.default_rng(1).standard_normal((30_000, 5)).astype(np.float32)
    actions, logp = policy.act(obs)
    assert actions.dtype == np.int64
    probs = np.exp([1.0, 0.0, -1.0]) / np.exp([1.0, 0.0, -1.0]).sum()
    np.testing.assert_allclose(np.bincount(actions, minlength=3) / len(actions), probs, atol=0.01)
    learner_logp, _, _ = net.evaluate(torch.from_numpy(obs), torch.from_numpy(actions))
    np.testing.assert_allclose(logp, learner_logp.detach().numpy(), atol=1e-5)
    mode, _ = policy.act(obs[:4], deterministic=True)
    np.testing.assert_array_equal(mode, [0, 0, 0, 0])


def test_same_generator_seed_same_actions():
    net = ActorCritic(BOX, (8,))
    obs = np.ones((4, 5), np.float32)
    a = NumpyPolicy(published(net), BOX, "tanh", np.random.default_rng(7)).act(obs)[0]
    b = NumpyPolicy(published(net), BOX, "tanh", np.random.default_rng(7)).act(obs)[0]
    c = NumpyPolicy(published(net), BOX, "tanh", np.random.default_rng(8)).act(obs)[0]
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_layers_are_read_in_index_order_not_key_order():
    net = ActorCritic(BOX, (4, 4, 4, 4, 4))  # policy.10 sorts before policy.2 as a string
    weights = published(net)
    layers = policy_layers(dict(reversed(list(weights.items()))))
    assert [w.shape for w, _ in layers] == [(4, 5), (4, 4), (4, 4), (4, 4), (4, 4), (2, 4)]
    np.testing.assert_array_equal(layers[-1][0], weights["policy.10.weight"])


@pytest.mark.parametrize(
    ("drop", "message"),
    [("log_std", "lack log_std"), ("policy.2.bias", "layer 2 lacks"), ("policy.", "no policy layers")],
)
def test_incomplete_weights_are_refused_by_name(drop, message):
    weights = {k: v for k, v in published(ActorCritic(BOX, (8,))).items() if not k.startswith(drop)}
    with pytest.raises(ValueError, match=message):
        NumpyPolicy(weights, BOX, "tanh", np.random.default_rng(0))


def test_weights_of_another_environment_are_refused():
    other = EnvSpaces(7, False, 2, BOX.action_low, BOX.action_high)
    with pytest.raises(ValueError, match="7 observations"):
        NumpyPolicy(published(ActorCritic(BOX, (8,))), other, "tanh")


def test_without_a_generator_only_the_mode_is_available():
    policy = NumpyPolicy(published(ActorCritic(BOX, (8,))), BOX, "tanh")
    policy.act(np.zeros((2, 5), np.float32), deterministic=True)
    with pytest.raises(RuntimeError, match="deterministically"):
        policy.act(np.zeros((2, 5), np.float32))


def test_actor_and_evaluator_roles_do_not_import_torch():
    code = (
        "import sys, surreal.runtime.onpolicy.actor, surreal.runtime.onpolicy.evaluator, "
        "surreal.component;"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"

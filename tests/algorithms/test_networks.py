"""The learner's ActorCritic: hand-written distributions agree with torch.distributions."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.distributions import Categorical, Normal

from surreal.runtime.envs.make import EnvSpaces
from surreal.runtime.onpolicy.networks import ActorCritic

DISCRETE = EnvSpaces(obs_dim=5, discrete=True, action_dim=3, action_low=None, action_high=None)
BOX = EnvSpaces(5, False, 2, np.full(2, -1.0, np.float32), np.full(2, 1.0, np.float32))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_categorical_logprob_and_entropy_match_torch():
    net = ActorCritic(DISCRETE, (16,), ortho_init=False)
    obs = torch.randn(64, 5)
    actions = torch.randint(0, 3, (64,))
    dist = Categorical(logits=net.policy(obs))
    new_logp, entropy, _ = net.evaluate(obs, actions)
    torch.testing.assert_close(new_logp, dist.log_prob(actions))
    torch.testing.assert_close(entropy, dist.entropy())


def test_gaussian_logprob_and_entropy_match_torch():
    net = ActorCritic(BOX, (16,), log_std_init=-0.7)
    obs = torch.randn(64, 5)
    actions = torch.randn(64, 2)
    dist = Normal(net.policy(obs), net.log_std.exp())
    new_logp, entropy, _ = net.evaluate(obs, actions)
    torch.testing.assert_close(new_logp, dist.log_prob(actions).sum(-1))
    torch.testing.assert_close(entropy, dist.entropy().sum(-1))


def test_orthogonal_init_small_policy_head_and_separate_value_net():
    net = ActorCritic(BOX, (32, 32))
    head = net.policy[-1].weight
    assert head.abs().max() < 0.05  # gain 0.01
    assert not any(p is q for p in net.policy.parameters() for q in net.critic.parameters())
    assert net.value(torch.randn(7, 5)).shape == (7,)
    assert net.log_std.detach().numpy().tolist() == [0.0, 0.0]


@pytest.mark.parametrize("rows", [4, 1024])  # below and above the sigmoid path's threshold
def test_tanh_matches_torch_values_and_gradients(rows):
    from surreal.runtime.onpolicy.networks import Tanh

    x = (torch.randn(rows, 64) * 4).requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    y, y_ref = Tanh()(x), torch.tanh(x_ref)
    torch.testing.assert_close(y, y_ref, atol=5e-7, rtol=0)
    grad = torch.randn(rows, 64)
    y.backward(grad)
    y_ref.backward(grad)
    # 1 - y^2 from a y that is off by <= 2e-7, times |grad| up to ~4
    torch.testing.assert_close(x.grad, x_ref.grad, atol=2e-6, rtol=0)


def test_mlp_is_a_sequential_with_the_same_keys_and_outputs():
    net = ActorCritic(BOX, (16, 16), activation="tanh")
    ref = torch.nn.Sequential(*net.policy)  # the same layers through the standard module calls
    assert list(net.policy.state_dict()) == list(ref.state_dict()) == [
        "0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias",
    ]  # fmt: skip
    obs = torch.randn(32, 5)
    torch.testing.assert_close(net.policy(obs), ref(obs))


def test_loaded_weights_are_the_ones_the_forward_pass_uses():
    a, b = ActorCritic(BOX, (16,)), ActorCritic(BOX, (16,))
    obs = torch.randn(8, 5)
    assert not torch.allclose(a.value(obs), b.value(obs))
    b.load_state_dict(a.state_dict())
    torch.testing.assert_close(b.value(obs), a.value(obs))
    torch.testing.assert_close(b.policy(obs), a.policy(obs))

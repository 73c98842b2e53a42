"""GAE and the PPO loss against values computed by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from surreal.algorithms.ppo.loss import compute_gae, ppo_loss


def gae(rewards, values, bootstrap, terminated=None, truncated=None, trunc_values=None, *,
        gamma=0.5, lam=0.5):  # fmt: skip
    r = np.array(rewards, np.float64).reshape(-1, 1)
    shape = r.shape
    term = np.zeros(shape, bool) if terminated is None else np.array(terminated).reshape(shape)
    trunc = np.zeros(shape, bool) if truncated is None else np.array(truncated).reshape(shape)
    tv = np.zeros(shape) if trunc_values is None else np.array(trunc_values, float).reshape(shape)
    adv, ret = compute_gae(r, np.array(values, float).reshape(shape), np.array([bootstrap], float),
                           term, trunc, tv, gamma, lam)  # fmt: skip
    return adv[:, 0], ret[:, 0]


def test_gae_without_episode_end():
    # gamma = lam = 0.5; deltas: d2 = 1 + .5*4 - 3 = 0, d1 = 1 + .5*3 - 2 = .5, d0 = 1 + .5*2 - 1 = 1
    # A2 = 0, A1 = .5 + .25*0 = .5, A0 = 1 + .25*.5 = 1.125
    adv, ret = gae([1, 1, 1], [1, 2, 3], bootstrap=4)
    np.testing.assert_allclose(adv, [1.125, 0.5, 0.0])
    np.testing.assert_allclose(ret, [2.125, 2.5, 3.0])


def test_gae_terminated_step_neither_bootstraps_nor_carries():
    # Step 1 terminates: d1 = 1 + 0 - 2 = -1 and A1 does not see step 2.
    # d2 = 1 + .5*4 - 3 = 0 -> A2 = 0; A1 = -1; d0 = 1 + .5*2 - 1 = 1 -> A0 = 1 + .25*(-1) = .75
    adv, _ = gae([1, 1, 1], [1, 2, 3], bootstrap=4, terminated=[0, 1, 0])
    np.testing.assert_allclose(adv, [0.75, -1.0, 0.0])


def test_gae_truncated_step_bootstraps_from_final_observation():
    # Step 1 is truncated; its final observation is worth 10 (row 2 is already the reset obs):
    # d1 = 1 + .5*10 - 2 = 4, no carry from step 2; A0 = 1 + .25*4 = 2
    adv, ret = gae([1, 1, 1], [1, 2, 3], bootstrap=4, truncated=[0, 1, 0],
                   trunc_values=[0, 10, 0])  # fmt: skip
    np.testing.assert_allclose(adv, [2.0, 4.0, 0.0])
    np.testing.assert_allclose(ret, [3.0, 6.0, 3.0])


def test_gae_truncation_on_last_step_ignores_the_bootstrap_value():
    # The bootstrap (4) is the reset observation's value; the final observation is worth 6:
    # d1 = 1 + .5*6 - 2 = 2; A0 = (1 + .5*2 - 1) + .25*2 = 1.5
    adv, _ = gae([1, 1], [1, 2], bootstrap=4, truncated=[0, 1], trunc_values=[0, 6])
    np.testing.assert_allclose(adv, [1.5, 2.0])


def test_gae_gamma_lambda_one_is_the_discounted_return_minus_value():
    adv, ret = gae([1, 2, 3], [0, 0, 0], bootstrap=5, gamma=1.0, lam=1.0)
    np.testing.assert_allclose(ret, [11, 10, 8])
    np.testing.assert_allclose(adv, [11, 10, 8])


def test_gae_columns_are_independent_envs():
    rewards = np.array([[1.0, 0.0], [1.0, 0.0]])
    values = np.zeros((2, 2))
    term = np.array([[False, True], [False, False]])
    adv, _ = compute_gae(rewards, values, np.array([0.0, 8.0]), term, np.zeros((2, 2), bool),
                         np.zeros((2, 2)), 0.5, 1.0)  # fmt: skip
    # env 0: A1 = 1, A0 = 1 + .5*1 = 1.5; env 1: A1 = .5*8 = 4, A0 = 0 (terminated at step 0)
    np.testing.assert_allclose(adv, [[1.5, 0.0], [1.0, 4.0]])


def loss_inputs(**overrides):
    t = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    base = dict(
        new_logp=t([np.log(1.5), np.log(0.5)]),
        old_logp=t([0.0, 0.0]),
        advantages=t([1.0, -2.0]),
        new_values=t([1.0, 3.0]),
        old_values=t([0.0, 2.5]),
        returns=t([2.0, 2.0]),
        entropy=t([0.7, 0.3]),
        clip_coef=0.2,
        clip_vloss=False,
        ent_coef=0.01,
        vf_coef=0.5,
    )
    return {**base, **overrides}


def test_ppo_loss_hand_computed():
    loss, stats = ppo_loss(**loss_inputs())
    # ratios 1.5 and 0.5. Sample 0 (A=1): max(-1.5, -1.2) = -1.2 (clipped).
    # Sample 1 (A=-2): max(1.0, 1.6) = 1.6 (clipped). policy_loss = (-1.2 + 1.6) / 2 = 0.2
    assert stats["policy_loss"].item() == pytest.approx(0.2)
    # value: 0.5 * mean((1-2)^2, (3-2)^2) = 0.5
    assert stats["value_loss"].item() == pytest.approx(0.5)
    assert stats["entropy"].item() == pytest.approx(0.5)
    assert loss.item() == pytest.approx(0.2 - 0.01 * 0.5 + 0.5 * 0.5)
    # approx_kl = mean((r - 1) - log r) = ((0.5 - log 1.5) + (-0.5 - log 0.5)) / 2
    kl = ((0.5 - np.log(1.5)) + (-0.5 - np.log(0.5))) / 2
    assert stats["approx_kl"].item() == pytest.approx(kl)
    assert stats["clipfrac"].item() == pytest.approx(1.0)


def test_ppo_loss_unclipped_ratio_uses_the_plain_surrogate():
    t = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    _, stats = ppo_loss(**loss_inputs(new_logp=t([np.log(1.1), np.log(0.95)])))
    # -1*1.1 and 2*0.95 (inside the clip range) -> (-1.1 + 1.9) / 2
    assert stats["policy_loss"].item() == pytest.approx(0.4)
    assert stats["clipfrac"].item() == 0.0


def test_ppo_loss_clipped_value_loss():
    _, stats = ppo_loss(**loss_inputs(clip_vloss=True))
    # Sample 0: V=1, old 0 -> Vc = 0.2: max((1-2)^2, (0.2-2)^2) = 3.24
    # Sample 1: V=3, old 2.5 -> Vc = 2.7: max(1, 0.49) = 1. 0.5 * mean = 1.06
    assert stats["value_loss"].item() == pytest.approx(1.06)


def test_ppo_loss_gradient_flows_only_through_unclipped_terms():
    new_logp = torch.tensor([np.log(1.5), np.log(1.1)], requires_grad=True)
    inputs = loss_inputs(new_logp=new_logp, advantages=torch.tensor([1.0, 1.0], dtype=torch.float64))
    loss, _ = ppo_loss(**inputs)
    loss.backward()
    # sample 0 is clipped (no gradient); sample 1: d(-A r / 2)/dlogp = -r/2 = -0.55
    np.testing.assert_allclose(new_logp.grad.numpy(), [0.0, -0.55], rtol=1e-6)

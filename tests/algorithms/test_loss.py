"""GAE and PPO's update (its loss, the statistics it reports, its gradient) against values
computed by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from surreal.algorithms.ppo import PPO
from surreal.algorithms.ppo.config import PPOConfig
from surreal.runtime.onpolicy.batch import Batch
from surreal.runtime.onpolicy.gae import compute_gae
from surreal.runtime.ranks import RankGroup


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


class Given(torch.nn.Module):
    """A network whose new log-probabilities are a parameter and whose entropies and values are
    given, row by row (the observations are row numbers: minibatches shuffle them)."""

    def __init__(self, new_logp, entropy, new_values):
        super().__init__()
        self.logp = torch.nn.Parameter(new_logp.clone())
        self.entropy, self.values = entropy, new_values

    def evaluate(self, obs, actions):
        return self.logp[obs], self.entropy[obs], self.values[obs] + 0 * self.logp.sum()


def ppo_update(**overrides):
    """PPO's statistics of one epoch on one minibatch of the inputs (no step: lr 0), and its net."""
    t = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    given = dict(new_logp=t([np.log(1.5), np.log(0.5)]), old_logp=t([0.0, 0.0]), advantages=t([1.0, -2.0]),
                 new_values=t([1.0, 3.0]), old_values=t([0.0, 2.5]), returns=t([2.0, 2.0]),
                 entropy=t([0.7, 0.3]), clip_vloss=False)  # fmt: skip
    given.update(overrides)
    rows = len(given["new_logp"])
    net = Given(given["new_logp"], given["entropy"], given["new_values"])
    cfg = PPOConfig(epochs=1, minibatch_size=rows, steps_per_update=rows, norm_adv=False, clip_coef=0.2,
                    clip_vloss=given["clip_vloss"], ent_coef=0.01, vf_coef=0.5,
                    max_grad_norm=1e9)  # fmt: skip
    batch = Batch(obs=torch.arange(rows), actions=torch.zeros(rows), logprobs=given["old_logp"],
                  values=given["old_values"], advantages=given["advantages"], returns=given["returns"],
                  group_rows=rows)  # fmt: skip
    stats = PPO().update(net, torch.optim.SGD(net.parameters(), lr=0.0), batch, cfg, RankGroup())
    return {k: float(v) for k, v in stats.items()}, net


def test_ppo_loss_hand_computed():
    stats, net = ppo_update()
    # ratios 1.5 and 0.5. Sample 0 (A=1): max(-1.5, -1.2) = -1.2 (clipped).
    # Sample 1 (A=-2): max(1.0, 1.6) = 1.6 (clipped). policy_loss = (-1.2 + 1.6) / 2 = 0.2
    assert stats["policy_loss"] == pytest.approx(0.2)
    # value: 0.5 * mean((1-2)^2, (3-2)^2) = 0.5
    assert stats["value_loss"] == pytest.approx(0.5)
    assert stats["entropy"] == pytest.approx(0.5)
    assert stats["grad_steps"] == 1
    # approx_kl = mean((r - 1) - log r) = ((0.5 - log 1.5) + (-0.5 - log 0.5)) / 2
    kl = ((0.5 - np.log(1.5)) + (-0.5 - np.log(0.5))) / 2
    assert stats["approx_kl"] == pytest.approx(kl)
    assert stats["clipfrac"] == pytest.approx(1.0)


def test_ppo_loss_unclipped_ratio_uses_the_plain_surrogate():
    t = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    stats, _ = ppo_update(new_logp=t([np.log(1.1), np.log(0.95)]))
    # -1*1.1 and 2*0.95 (inside the clip range) -> (-1.1 + 1.9) / 2
    assert stats["policy_loss"] == pytest.approx(0.4)
    assert stats["clipfrac"] == 0.0


def test_ppo_loss_clipped_value_loss():
    stats, _ = ppo_update(clip_vloss=True)
    # Sample 0: V=1, old 0 -> Vc = 0.2: max((1-2)^2, (0.2-2)^2) = 3.24
    # Sample 1: V=3, old 2.5 -> Vc = 2.7: max(1, 0.49) = 1. 0.5 * mean = 1.06
    assert stats["value_loss"] == pytest.approx(1.06)


def test_ppo_loss_gradient_flows_only_through_unclipped_terms():
    new_logp = torch.tensor([np.log(1.5), np.log(1.1)], dtype=torch.float64)
    _, net = ppo_update(new_logp=new_logp, advantages=torch.tensor([1.0, 1.0], dtype=torch.float64))
    # sample 0 is clipped (no gradient); sample 1: d(-A r / 2)/dlogp = -r/2 = -0.55
    np.testing.assert_allclose(net.logp.grad.numpy(), [0.0, -0.55], rtol=1e-6)


def test_the_loss_of_a_sample_with_an_absurd_behaviour_logprob_is_finite_and_ignored():
    t = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    stats, net = ppo_update(new_logp=t([0.0] * 4), old_logp=t([0.0, 0.0, 0.0, -1e30]),
                            advantages=t([1.0, -1.0, 0.5, -2.0]), new_values=t([0.0] * 4),
                            old_values=t([0.0] * 4), returns=t([0.0] * 4), entropy=t([0.0] * 4))  # fmt: skip
    assert all(np.isfinite(v) for v in stats.values())
    assert net.logp.grad[3] == 0 and torch.isfinite(net.logp.grad).all()

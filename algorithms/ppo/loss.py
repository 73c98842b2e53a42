"""PPO maths as pure functions: generalized advantage estimation and the clipped loss."""

from __future__ import annotations

import numpy as np
import torch

MAX_LOG_RATIO = 20.0  # |log pi_new(a|s) - log pi_old(a|s)| beyond this is clamped (see ppo_loss)


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    bootstrap_value: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    trunc_values: np.ndarray,
    gamma: float,
    lam: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Advantages and returns [T, N] of a fragment (Schulman et al., 2016).

    rewards, values, terminated, truncated, trunc_values: [T, N]; bootstrap_value: [N] is the
    value of the observation after the last step. At a terminated step the next value is 0; at a
    truncated step it is trunc_values[t] (the value of the episode's final observation, since the
    next row is already the reset observation). Neither lets advantages flow across the boundary.
    """
    terminated = terminated.astype(bool)
    truncated = truncated.astype(bool)
    next_values = np.concatenate([values[1:], bootstrap_value[None]], axis=0)
    next_values = np.where(truncated, trunc_values, next_values)
    next_values = np.where(terminated, 0.0, next_values)
    deltas = rewards + gamma * next_values - values
    carry = gamma * lam * ~(terminated | truncated)
    advantages = np.empty_like(deltas)
    last = np.zeros_like(bootstrap_value, dtype=deltas.dtype)
    for t in range(rewards.shape[0] - 1, -1, -1):
        last = deltas[t] + carry[t] * last
        advantages[t] = last
    return advantages, advantages + values


def ppo_loss(
    new_logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    new_values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    entropy: torch.Tensor,
    clip_coef: float,
    clip_vloss: bool,
    ent_coef: float,
    vf_coef: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped-surrogate PPO loss (Schulman et al., 2017) over one minibatch.

    loss = policy_loss - ent_coef * entropy + vf_coef * value_loss, with
    policy_loss = mean(max(-A r, -A clip(r, 1-c, 1+c))), r = exp(new_logp - old_logp), and
    value_loss = 0.5 mean((V - R)^2), or with clip_vloss 0.5 mean(max((V - R)^2, (Vc - R)^2))
    where Vc = old_V + clip(V - old_V, -c, c). Stats are detached scalars (no host sync here).
    """
    # No sample of an honest actor at most max_policy_lag versions old comes near e^20; the clamp
    # keeps one with corrupt log-probabilities from making the loss infinite (its gradient is 0).
    logratio = (new_logp - old_logp).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    ratio = logratio.exp()
    pg_loss = torch.max(
        -advantages * ratio, -advantages * ratio.clamp(1.0 - clip_coef, 1.0 + clip_coef)
    ).mean()
    v_err = (new_values - returns).square()
    if clip_vloss:
        v_clipped = old_values + (new_values - old_values).clamp(-clip_coef, clip_coef)
        v_err = torch.max(v_err, (v_clipped - returns).square())
    v_loss = 0.5 * v_err.mean()
    ent = entropy.mean()
    loss = pg_loss - ent_coef * ent + vf_coef * v_loss
    with torch.no_grad():
        stats = {
            "policy_loss": pg_loss.detach(),
            "value_loss": v_loss.detach(),
            "entropy": ent.detach(),
            # Unbiased low-variance KL estimator (Schulman, "Approximating KL divergence").
            "approx_kl": ((ratio - 1.0) - logratio).mean(),
            "clipfrac": ((ratio - 1.0).abs() > clip_coef).float().mean(),
        }
    return loss, stats

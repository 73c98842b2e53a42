"""PPO (Schulman et al., 2017) on the on-policy runtime (runtime/onpolicy): its settings
(config.py), its presets per environment (presets.py, scaling.py), and its update, below."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from surreal.algorithms.api import Network, OnPolicy, Reduce
from surreal.algorithms.ppo import presets
from surreal.algorithms.ppo.config import PPOConfig

if TYPE_CHECKING:
    import torch

    from surreal.algorithms.api import Batch

# |log pi_new(a|s) - log pi_old(a|s)| beyond this is clamped: no sample of an honest actor at most
# max_policy_lag versions old comes near e^20; the clamp keeps one with corrupt log-probabilities
# from making the loss infinite (its gradient is 0).
MAX_LOG_RATIO = 20.0


class PPO(OnPolicy):
    name = "ppo"
    Config = PPOConfig

    def preset(self, env: Any, agents: int, resolved: Any = None) -> PPOConfig:
        return presets.preset_for(env, agents, resolved=resolved)

    def default_steps(self, env: Any, agents: int, resolved: Any = None) -> int:
        return presets.default_steps(env, agents, resolved=resolved)

    def update(self, net: Network, optimizer: torch.optim.Optimizer, batch: Batch,
               cfg: PPOConfig, reduce: Reduce) -> dict[str, Any]:  # fmt: skip
        """`epochs` passes of clipped PPO over shuffled minibatches (CleanRL's ppo.py): the
        clipped surrogate, the (clipped) value loss and the entropy bonus; a gradient step per
        minibatch, clipped to `max_grad_norm`; the epochs stop early once the mean approximate KL
        of an epoch exceeds `target_kl`."""
        import torch

        params = list(net.parameters())
        n = max(1, round(batch.group_rows / cfg.minibatch_size))
        epochs = []  # per epoch: [n, 5] the group's means of each minibatch's statistics
        for minibatches in batch.epochs(cfg.epochs, n, reduce):
            epoch = []
            for mb in minibatches:
                new_logp, entropy, new_values = net.evaluate(mb.obs, mb.actions)
                logratio = (new_logp - mb.logprobs).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
                ratio = logratio.exp()
                adv = mb.normalized(mb.advantages, reduce) if cfg.norm_adv else mb.advantages
                pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef))
                v_loss = (new_values - mb.returns).square()
                if cfg.clip_vloss:
                    v_clipped = mb.values + (new_values - mb.values).clamp(-cfg.clip_coef, cfg.clip_coef)
                    v_loss = torch.max(v_loss, (v_clipped - mb.returns).square())
                v_loss = 0.5 * v_loss
                loss = mb.mean(pg_loss - cfg.ent_coef * entropy + cfg.vf_coef * v_loss)

                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                reduce.sum_grads(params)
                torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm, foreach=True)
                optimizer.step()

                with torch.no_grad():  # Schulman's low-variance estimator of KL(old, new)
                    approx_kl = (ratio - 1) - logratio
                    clipped = ((ratio - 1).abs() > cfg.clip_coef).float()
                    epoch.append(
                        torch.stack([mb.mean(x) for x in (pg_loss, v_loss, entropy, approx_kl, clipped)])
                    )
            epochs.append(reduce.sum(torch.stack(epoch).double()))
            if cfg.target_kl is not None and epochs[-1][:, 3].mean() > cfg.target_kl:
                break
        policy_loss, value_loss, entropy, approx_kl, clipfrac = torch.cat(epochs).mean(0)
        return {"policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy,
                "approx_kl": approx_kl, "clipfrac": clipfrac, "grad_steps": n * len(epochs)}  # fmt: skip

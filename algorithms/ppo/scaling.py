"""How a PPO preset, tuned for REFERENCE_AGENTS agents, follows the number of agents A (the rule's
reasons and what it gives: docs/algorithms/ppo.md). With the preset's envs per agent e0, fragment
length T0 and batch B0 (`steps_per_update`):

1. Total envs stay at E0 = 2 e0 while they can: e = max(1, E0 // A), so E = A e.
2. One fragment from every env still makes about one batch: T = clamp(B0 / E, MIN_FRAGMENT, T0), a
   power of two.
3. The batch is one fragment of every env, at least the preset's: B = max(B0, E T).
4. With g = B / B0, the minibatch, the step budget and the evaluation interval grow by sqrt(g), the
   learning rate by g^(1/4) (Adam's square-root scaling with the minibatch, Malladi et al., 2022).

For 2 agents the preset is unchanged.
"""

from __future__ import annotations

import dataclasses
import math

from surreal.algorithms.ppo.config import PPOConfig

REFERENCE_AGENTS = 2  # the presets are tuned for this many agents
# Env steps: the shortest fragment the rule makes (unless the preset's is shorter). Every fragment
# costs the learner's server a message however long it is (~0.4 ms of its CPU here), so at scale
# fragments stay long and the batch grows instead (benchmarks/learner_ceiling.py).
MIN_FRAGMENT = 128


def _pow2_floor(x: float) -> int:
    return 1 << max(0, math.floor(math.log2(max(1.0, x))))


def scale(cfg: PPOConfig, agents: int) -> PPOConfig:
    """The preset `cfg` (tuned for REFERENCE_AGENTS agents) for `agents` agents (the rule above)."""
    if agents < 1:
        raise ValueError(f"agents must be >= 1, got {agents}")
    envs_per_agent = max(1, REFERENCE_AGENTS * cfg.envs_per_agent // agents)
    envs = agents * envs_per_agent
    shortest = min(MIN_FRAGMENT, cfg.fragment_length)
    fragment = min(cfg.fragment_length, max(shortest, _pow2_floor(cfg.steps_per_update / envs)))
    batch = max(cfg.steps_per_update, envs * fragment)
    root = math.sqrt(batch / cfg.steps_per_update)
    return dataclasses.replace(
        cfg,
        envs_per_agent=envs_per_agent,
        fragment_length=fragment,
        steps_per_update=batch,
        minibatch_size=min(batch, round(cfg.minibatch_size * root)),
        learning_rate=cfg.learning_rate * math.sqrt(root),
        eval_interval=round(cfg.eval_interval * root),
    )


def scale_steps(steps: int, cfg: PPOConfig, agents: int) -> int:
    """The step budget `steps` (for REFERENCE_AGENTS agents) for `agents` agents."""
    return round(steps * math.sqrt(scale(cfg, agents).steps_per_update / cfg.steps_per_update))

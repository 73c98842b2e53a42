"""Desktop-tuned ES presets per environment, with how each was validated.

Reproduce with the serial harness, e.g.
`python -m surreal.serial --algo es --env CartPole-v1 --steps 1000000 --agents 8 --seed 0`,
or the real thing: `surreal create es-cp --algo es --env CartPole-v1 --agents 8 --steps 3000000`.
"""

from __future__ import annotations

import dataclasses

from surreal.runtime import bounds
from surreal.runtime.envs.make import resolve_env
from surreal.runtime.envs.obs_leaves import ObsLeaf, summary
from surreal.runtime.envs.ref import EnvRef, ResolvedEnv, as_env_ref
from surreal.runtime.es.config import ESConfig

PRESETS: dict[str, ESConfig] = {
    # Serial harness, 8 agents, seed 0: eval 500 from 100k steps on; `es-cp` in docs/algorithms/es.md.
    "CartPole-v1": ESConfig(
        policy="linear",
        population=16,
        sigma=0.1,
        learning_rate=0.05,
        eval_interval=100_000,
    ),
    # Swing-up needs a nonlinear policy; relu trained faster than tanh here. Serial harness, 8 agents:
    # eval -171 at 1.5M steps (seed 0), -210 at 2M (seed 1); the 32x32 tanh MLP stayed near -900.
    "Pendulum-v1": ESConfig(
        policy="mlp",
        hidden_sizes=(64, 64),
        activation="relu",
        population=64,
        sigma=0.05,
        learning_rate=0.03,
        eval_interval=200_000,
    ),
    # ARS-style: a linear policy on normalized observations. Serial harness, 16 agents, seed 0: eval
    # 2,949 at 3M steps; `surreal create --agents 16 --steps 20000000`: 5,323 and 6,015 (two sessions).
    "HalfCheetah-v5": ESConfig(
        policy="linear",
        population=32,
        sigma=0.03,
        learning_rate=0.02,
        eval_interval=500_000,
    ),
    # ARS's recipe for Hopper: a linear policy, the alive bonus (1 per step) subtracted before ranking
    # (otherwise standing still is a local optimum), the better half of the pairs. Serial harness,
    # 8 agents, seed 0: eval 3,000 at 0.8M steps, 3,504 at 4M (one dip to 1,250 at 1.6M).
    "Hopper-v5": ESConfig(
        policy="linear",
        population=16,
        sigma=0.025,
        learning_rate=0.02,
        reward_shift=1.0,
        top_fraction=0.5,
        eval_interval=500_000,
    ),
}

# With many agents (rounds: ESConfig.round_pairs), 20M steps are only ~39 updates of 256 pairs.
# HalfCheetah then needs ARS's top directions (the best eighth of the pairs; keeping all ended at
# 1,685 with 512 agents) and the step annealed to 0 (without it, evaluations swung by 1,000s to
# the end): 3,123 and 3,937 with 512 agents (seeds 0, 1). With 16 agents the same settings cost
# (3,977 against 6,015), so they apply only in rounds. docs/algorithms/es.md has the commands.
MANY_AGENTS: dict[str, dict[str, object]] = {
    "HalfCheetah-v5": {"top_fraction": 0.125, "anneal_lr": True},
}

# Env steps a run trains for when `--steps` is not given (what the results in docs/algorithms/es.md
# were measured with).
DEFAULT_STEPS: dict[str, int] = {
    "CartPole-v1": 500_000,
    "Pendulum-v1": 2_000_000,
    "HalfCheetah-v5": 20_000_000,
    "Hopper-v5": 4_000_000,
}
OTHER_STEPS = 10_000_000


def preset_for(env_id: EnvRef | str, agents: int = 2, *, resolved: ResolvedEnv | None = None) -> ESConfig:
    """The tuned config for `env_id`, or the defaults for environments without one; with so many
    agents that the master works in rounds, that environment's MANY_AGENTS changes too. The master
    sizes its updates to the number of agents itself (ESConfig.pairs_per_update). By id only:
    `resolved` is not needed."""
    name = as_env_ref(env_id).name
    cfg = PRESETS.get(name, ESConfig())
    if name in MANY_AGENTS and cfg.round_pairs(agents) > 0:
        cfg = dataclasses.replace(cfg, **MANY_AGENTS[name])  # type: ignore[arg-type]
    return cfg


def default_steps(env_id: EnvRef | str, agents: int = 2, *, resolved: ResolvedEnv | None = None) -> int:
    """The step budget of a run on `env_id` when none is given."""
    return DEFAULT_STEPS.get(as_env_ref(env_id).name, OTHER_STEPS)


def check_env_supported(env: EnvRef | str, *, resolved: ResolvedEnv | None = None) -> None:
    """Raise ValueError if `env` cannot be made or has spaces ES here cannot handle (`resolved`:
    the spec's, else those of one instance built here). Pixel
    observations are refused: ES perturbs every weight of an MLP policy run in numpy, and a CNN
    big enough for pixels (Nature CNN: 1.7M weights) makes each perturbation's evaluation and the
    population needed to estimate its gradient far dearer than PPO on the same pixels
    (docs/decisions.md)."""
    facts = resolved or resolve_env(env)
    if facts.pixels:
        raise ValueError(
            f"ES does not support image observations ({env}): use --algo ppo, which trains a CNN "
            "policy on pixels"
        )
    if facts.obs_leaves:
        leaves = summary([ObsLeaf.from_dict(leaf) for leaf in facts.obs_leaves])
        raise ValueError(
            f"ES takes observations that are one Box; {env}'s are {leaves}: use --algo ppo, which "
            "encodes each of them"
        )


def check_config(cfg: ESConfig, env: EnvRef | str, *, resolved: ResolvedEnv | None = None) -> None:
    """Raise ValueError if the master could not hold `cfg`'s policy (its weights, gradient and
    Adam's moments; each worker holds less)."""
    facts = resolved or resolve_env(env)
    hidden = cfg.hidden_sizes if cfg.policy == "mlp" else ()
    bounds.check_learner_memory("es", bounds.mlp_parameters([facts.obs_dim, *hidden, facts.action_dim]))

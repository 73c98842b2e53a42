"""What the off-policy runtime reads from an algorithm's config: sampling, the replay and its rate,
the batch and the optimizer, the networks and bookkeeping. SAC's config (algorithms/sac) derives
from it; `--set NAME=VALUE` reaches every field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from surreal.protocol.options import MAX_MESSAGE_BYTES
from surreal.runtime import bounds
from surreal.runtime.config import FEATURES, TINY, RunConfig
from surreal.runtime.envs.make import EnvSpaces, resolve_env, spaces_of
from surreal.runtime.envs.obs_leaves import image_slice
from surreal.runtime.envs.ref import EnvRef, ResolvedEnv
from surreal.runtime.offpolicy import obs

# A replay shard's memory beyond its rows: the interpreter, numpy, the server and a save's copy.
SHARD_BASE_MB = 256


@dataclass(frozen=True)
class OffPolicyConfig(RunConfig):
    section: ClassVar[str] = "offpolicy"

    # --- sampling (actors) ---
    envs_per_agent: int = 1
    fragment_length: int = (
        16  # its rows: this x envs; a worker has `credits_per_worker` in flight to its shard
    )
    random_steps: int = 1_000  # env steps (all workers) of uniform random actions first

    # --- the replay and its rate ---
    buffer_size: int = 1_000_000  # transitions held, in all shards together
    learning_starts: int = 1_000  # transitions in before the first update (all shards)
    # Rows trained per row inserted (Reverb's samples_per_insert): batch_size x gradient steps per
    # env step. 256 is SB3's SAC (batch 256, one gradient step per env step).
    replay_ratio: float = 256.0

    # --- the batch and the optimizer (learner) ---
    batch_size: int = 256
    tau: float = 0.005  # target networks' Polyak step
    publish_seconds: float = 0.05  # a new policy version at least this often while it trains

    # --- networks: each MLP after the observation's encoder (encoder.py) ---
    hidden_sizes: tuple[int, ...] = (256, 256)
    activation: str = "relu"

    # --- bookkeeping ---
    checkpoint_every: int = 10_000
    eval_interval: int = 5_000

    def validate(self) -> None:
        super().validate()
        self.require(self.learning_starts <= self.buffer_size, "learning_starts",
                     f"must be at most buffer_size ({self.buffer_size:,})")  # fmt: skip


OffPolicyConfig.BOUNDS = {
    **RunConfig.BOUNDS, "random_steps": (0, 10**13), "buffer_size": (1, 10**10),
    "learning_starts": (1, 10**10), "replay_ratio": (1e-3, 1e6), "batch_size": (1, 1 << 16),
    "tau": (TINY, 1.0), "publish_seconds": (1e-3, 3600.0),
}  # fmt: skip


def transition_bytes(sp: EnvSpaces) -> int:
    """One row of the replay: the observation and the next one as they travel (obs.py: images a
    byte a pixel), the action, reward and terminated."""
    return sum(np.dtype(d).itemsize * int(np.prod(s)) for d, s in obs.transition_fields(sp).values())


def features(sp: EnvSpaces) -> int:
    """The width the MLPs take after the encoder (encoder.py, without building it): an image's
    CNN features in place of its pixels."""
    found = image_slice(obs.leaves(sp))
    return sp.obs_dim if found is None else sp.obs_dim - found[1].width + FEATURES


def check_config(cfg: OffPolicyConfig, env: EnvRef | str, *, resolved: ResolvedEnv | None = None) -> None:
    """Raise ValueError if `cfg` cannot train on `env`: the observation keys it names, the networks
    and the batch in a learner, a sample and a fragment in a message."""
    cfg.validate()
    sp = spaces_of(resolved or resolve_env(env)).keep(cfg.obs_keys, str(env))
    row = transition_bytes(sp)
    widths = [features(sp) + sp.action_dim, *cfg.hidden_sizes]
    critics = 4 * bounds.mlp_parameters([*widths, 1])  # twin critics and their targets
    params = critics + bounds.mlp_parameters([features(sp), *cfg.hidden_sizes, 2 * sp.action_dim])
    batch_floats = cfg.batch_size * (2 * sp.obs_dim + sp.action_dim + 2)  # packed, on the learner
    bounds.check_learner_memory(cfg.section, params, batch_floats * 4)
    if cfg.batch_size * row > MAX_MESSAGE_BYTES // 2:
        raise ValueError(f"{cfg.section}.batch_size ({cfg.batch_size:,}) rows of {row:,} bytes would not fit "
                         f"in a message ({MAX_MESSAGE_BYTES // 2**20} MiB): lower it")  # fmt: skip
    if cfg.fragment_length * cfg.envs_per_agent * row > MAX_MESSAGE_BYTES // 2:
        raise ValueError(
            f"{cfg.section}.fragment_length x envs_per_agent rows would not fit in a message: lower them"
        )


def shard_memory_mb(cfg: OffPolicyConfig, sp: EnvSpaces, shards: int) -> int:
    """What one replay shard holds: its share of buffer_size rows, and SHARD_BASE_MB."""
    rows = -(-cfg.buffer_size // shards)
    return SHARD_BASE_MB + int(np.ceil(rows * transition_bytes(sp.keep(cfg.obs_keys)) / 2**20))

"""Serial harness of an off-policy algorithm: the actor's fragments into one replay, `update` at the
replay ratio exactly, in one process, no networking; for learning tests and preset tuning (the same
Actor, Rows and update the roles run):

    python -m surreal.serial --algo sac --env Pendulum-v1 --steps 20000 --seed 0
    PYTHONPATH=tests/envs python -m surreal.serial --algo sac --env cue_world:CueWorld-v0 \
        --set env_kwargs.actions=box --set env_kwargs.note=false --set obs_keys=frame --steps 6000
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from surreal.protocol.types import Params
from surreal.runtime.envs.make import EnvBatch, spaces_for
from surreal.runtime.envs.ref import EnvRef
from surreal.runtime.evaluator import eval_seed, evaluate
from surreal.runtime.offpolicy import obs
from surreal.runtime.offpolicy.actor import Actor
from surreal.runtime.offpolicy.config import OffPolicyConfig
from surreal.runtime.offpolicy.evaluator import eval_policy
from surreal.runtime.offpolicy.replay import Rows
from surreal.runtime.offpolicy.shard import fields
from surreal.runtime.progress import anneal
from surreal.runtime.run import progress_extras

if TYPE_CHECKING:
    from surreal.algorithms.api import OffPolicy


def train_serial(algo: OffPolicy, cfg: OffPolicyConfig, env: EnvRef | str, total_steps: int, seed: int = 0
                 ) -> tuple[float, int, float]:  # fmt: skip
    """Train for `total_steps` env steps; (the final policy's mean eval return, updates, seconds)."""
    started = time.monotonic()
    torch.manual_seed(seed)
    torch.set_num_threads(cfg.learner_threads)  # one process does everything; small ops
    sp = spaces_for(env).keep(cfg.obs_keys)
    nets: Any = algo.make(cfg, sp)
    actor = Actor(algo, cfg, env, cfg.envs_per_agent, seed, cfg.random_steps, total_steps)
    rows, rng = Rows(fields(sp), cfg.buffer_size), np.random.default_rng(seed)
    inserted, owed, updates = 0, 0.0, 0

    def params() -> Params:
        weights = {k: v.detach().numpy() for k, v in nets.actor.state_dict().items()}
        return Params(updates, weights, progress_extras(inserted, False))

    actor.set_params(params())
    while inserted < total_steps:
        fragment = actor.collect()
        rows.add({k: fragment[k] for k in rows.data})
        inserted += len(fragment["rewards"])
        if inserted < cfg.learning_starts:
            continue
        owed += len(fragment["rewards"]) * cfg.replay_ratio / cfg.batch_size
        if cfg.anneal_lr:
            anneal(nets.optimizers().values(), 1.0 - inserted / total_steps)
        while owed >= 1:
            batch = rows.sample(cfg.batch_size, rng)
            algo.update(nets, {k: torch.from_numpy(v) for k, v in obs.batch(sp, batch).items()}, cfg)
            owed, updates = owed - 1, updates + 1
        actor.set_params(params())
    actor.close()
    envs = EnvBatch(env, cfg.eval_episodes, seed=eval_seed(seed), training=False, obs_keys=cfg.obs_keys)
    try:
        result = evaluate(envs, eval_policy(algo, cfg, sp, params()))
    finally:
        envs.close()
    return result.mean_return, updates, time.monotonic() - started

"""Serial harness of an off-policy algorithm: the actor's fragments into one replay, `update` at the
replay ratio exactly, in one process, no networking; for learning tests and preset tuning (the same
Actor, Rows and update the roles run):

    python -m surreal.algorithms.offpolicy.serial --env Pendulum-v1 --steps 20000 --seed 0
    PYTHONPATH=tests/envs python -m surreal.algorithms.offpolicy.serial --env cue_world:CueWorld-v0 \
        --env-kwarg actions=box --env-kwarg note=False --set 'obs_keys=("frame",)' --steps 6000
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import time
from typing import Any

import numpy as np
import torch

from surreal.algorithms.api import OffPolicy
from surreal.algorithms.common.evaluator import eval_seed, evaluate
from surreal.algorithms.envs.make import EnvBatch, spaces_for
from surreal.algorithms.envs.ref import EnvRef
from surreal.algorithms.offpolicy import obs
from surreal.algorithms.offpolicy.actor import Actor
from surreal.algorithms.offpolicy.config import OffPolicyConfig
from surreal.algorithms.offpolicy.evaluator import eval_policy
from surreal.algorithms.offpolicy.replay import Rows
from surreal.algorithms.offpolicy.shard import fields
from surreal.algorithms.registry import get_algorithm
from surreal.protocol.types import Params


def train_serial(algo: OffPolicy, cfg: OffPolicyConfig, env: EnvRef | str, total_steps: int, seed: int = 0
                 ) -> tuple[float, int, float]:  # fmt: skip
    """Train for `total_steps` env steps; (the final policy's mean eval return, updates, seconds)."""
    started = time.monotonic()
    torch.manual_seed(seed)
    sp = spaces_for(env).keep(cfg.obs_keys)
    nets: Any = algo.make(cfg, sp)
    actor = Actor(cfg, env, cfg.envs_per_agent, seed, cfg.random_steps)
    rows, rng = Rows(fields(sp), cfg.buffer_size), np.random.default_rng(seed)
    inserted, owed, updates = 0, 0.0, 0

    def params() -> Params:
        return Params(updates, {k: v.detach().numpy() for k, v in nets.actor.state_dict().items()}, {})

    actor.set_params(params())
    while inserted < total_steps:
        fragment = actor.collect()
        rows.add({k: fragment[k] for k in rows.data})
        inserted += len(fragment["rewards"])
        if inserted < cfg.learning_starts:
            continue
        owed += len(fragment["rewards"]) * cfg.replay_ratio / cfg.batch_size
        while owed >= 1:
            batch = rows.sample(cfg.batch_size, rng)
            algo.update(nets, {k: torch.from_numpy(v) for k, v in obs.batch(sp, batch).items()}, cfg)
            owed, updates = owed - 1, updates + 1
        actor.set_params(params())
    actor.close()
    envs = EnvBatch(env, cfg.eval_episodes, seed=eval_seed(seed), training=False, obs_keys=cfg.obs_keys)
    try:
        result = evaluate(envs, eval_policy(cfg, sp, params()))
    finally:
        envs.close()
    return result.mean_return, updates, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--algo", default="sac")
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument(
        "--env-kwarg",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a keyword argument of the environment's constructor (a Python literal or text)",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    algo = get_algorithm(args.algo)
    assert isinstance(algo, OffPolicy), f"{args.algo} is not an off-policy algorithm"
    overrides = {k: ast.literal_eval(v) for k, v in (s.split("=", 1) for s in args.set)}
    env = EnvRef(args.env, {k: _literal(v) for k, v in (s.split("=", 1) for s in args.env_kwarg)})
    cfg = dataclasses.replace(algo.preset(env, 1), **overrides)
    ret, updates, seconds = train_serial(algo, cfg, env, args.steps, args.seed)
    print(f"{args.env} seed {args.seed}: eval return {ret:.1f}, {updates} updates, {seconds:.0f} s")


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


if __name__ == "__main__":
    main()

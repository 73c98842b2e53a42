"""The ES learner role (the master): serves `ESMaster` over the protocol.

Workers fetch (version, parameters, nonce, normalization) with Parameters.Get and send result
batches up their experience stream; ES messages are tiny, so one stream per worker process is
plenty and the server is sized for as many streams as there could be workers (one per logical
agent at most, on any backend).
"""

from __future__ import annotations

import logging

from surreal.runtime.envs.make import spaces_for
from surreal.runtime.es.config import ESConfig
from surreal.runtime.es.evaluator import deterministic_policy
from surreal.runtime.es.master import ESMaster
from surreal.runtime.es.results import results_schema
from surreal.runtime.run import RunContext
from surreal.runtime.serving import ServingLoop, initial_agents

log = logging.getLogger(__name__)


def run_learner(cfg: ESConfig, ctx: RunContext) -> int:
    """Serve results and parameters until `total_steps` env steps of accepted results are in and
    the final version is evaluated; exit 0. Resumes from the last checkpoint in `ctx.exp_dir`."""
    cfg.validate()
    spaces = spaces_for(ctx.env)
    # `cfg` is the create-time config (the spec's; presets.MANY_AGENTS chosen for the spec's count):
    # a scale changes the master's hand-out and round sizes, never these (ESMaster.set_agents).
    agents = initial_agents(ctx)
    master = ESMaster(cfg, spaces, ctx.total_steps, ctx.num_agents, seed=ctx.seed, exp_dir=ctx.exp_dir,
                      agents=agents)  # fmt: skip
    loop = ServingLoop(
        master, ctx, take=lambda fragment: master.add_results(fragment.tensors, fragment.worker_id),
        experience_schema=results_schema(spaces.obs_dim),
        credits_per_stream=cfg.credits_per_worker, agents=agents,
        # A worker that finished its hand-out waits for its credits (actor.py), so that the next
        # version it starts is the one its own results made, not one made just before they landed.
        credit_on_take=False,
    )  # fmt: skip
    return loop.run(
        ctx, final_eval_timeout=cfg.final_eval_timeout, eval_episodes=cfg.eval_episodes,
        policy_for=lambda params: deterministic_policy(cfg, spaces, params),
    )  # fmt: skip

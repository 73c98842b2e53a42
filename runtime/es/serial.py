"""ES master and workers in one process, no networking: for tuning presets and debugging.

    python -m surreal.serial --algo es --env CartPole-v1 --steps 1000000 --agents 8 --seed 0 \
        [--workers 2] [--set key=value ...]

The same ESMaster and ESWorker classes the roles run, stepped in turn, so a curve here is the
curve of a distributed run with no network delay.
"""

from __future__ import annotations

import time

from surreal.runtime.envs.make import EnvBatch, spaces_for
from surreal.runtime.envs.ref import EnvRef
from surreal.runtime.es.actor import ESWorker, agent_ids
from surreal.runtime.es.config import ESConfig
from surreal.runtime.es.evaluator import deterministic_policy
from surreal.runtime.es.master import ESMaster
from surreal.runtime.evaluator import eval_seed, evaluate


def train(cfg: ESConfig, env_id: EnvRef | str, steps: int, agents: int, seed: int, eval_every: int,
          workers: int = 1) -> float:  # fmt: skip
    """Train for `steps` accepted env steps; print evaluations; return the final eval return.

    With `workers` > 1 the agents are split into that many workers stepped in lockstep; a worker
    takes the newest version as soon as its own results completed updates, before the next
    worker's results land, or when it is idle, as real workers do (actor.py)."""
    master = ESMaster(cfg, spaces_for(env_id), steps, agents, seed=seed)
    sizes = [agents // workers + (i < agents % workers) for i in range(workers)]
    pool = [ESWorker(cfg, env_id, agent_ids(i, n), seed=seed + i) for i, n in enumerate(sizes)]
    envs = EnvBatch(env_id, cfg.eval_episodes, seed=eval_seed(seed), training=False)
    start, next_eval, result = time.monotonic(), 0, float("nan")
    for worker in pool:
        worker.set_params(master.params())
    while not master.done:
        for worker in pool:
            worker.start_idle()
            if not worker.busy and worker.version < master.counters.version:
                worker.set_params(master.params())  # idle: it polls for the next version
                worker.start_idle()
        if not any(worker.busy for worker in pool):  # a round short of pairs waits its time
            deadline = time.monotonic() + 60.0
            while not master.ready() and time.monotonic() < deadline:
                time.sleep(0.05)
            if not master.ready():
                raise RuntimeError("every pair handed out came back and no update is due")
            while master.ready():
                master.update()
            continue
        for worker in pool:
            if worker.busy:
                worker.step()
            if (batch := worker.take_batch()) is not None:
                master.add_results(batch)
            if master.ready():
                while master.ready():
                    master.update()
                worker.set_params(master.params())
        if master.counters.env_steps >= next_eval or master.done:
            next_eval += eval_every
            params = master.params()
            result = evaluate(envs, deterministic_policy(cfg, pool[0].spaces, params)).mean_return
            print(f"{master.counters.env_steps:>10,} steps  {master.counters.updates:>5} updates  "
                  f"eval {result:8.1f}  train {master.status()['train_return'] or 0:8.1f}  "
                  f"staleness {master.status()['staleness'] or 0:4.2f}  "
                  f"{time.monotonic() - start:6.0f}s", flush=True)  # fmt: skip
    for worker in pool:
        worker.close()
    envs.close()
    return result

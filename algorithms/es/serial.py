"""ES master and workers in one process, no networking: for tuning presets and debugging.

    python -m surreal.algorithms.es.serial --env CartPole-v1 --steps 1000000 --agents 8 --seed 0 \
        [--workers 2] [--set key=value ...]

The same ESMaster and ESWorker classes the roles run, stepped in turn, so a curve here is the
curve of a distributed run with no network delay.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Any

from surreal.algorithms.common.evaluator import eval_seed, evaluate
from surreal.algorithms.envs.make import EnvBatch, spaces_for
from surreal.algorithms.es.actor import ESWorker, agent_ids
from surreal.algorithms.es.config import ESConfig
from surreal.algorithms.es.evaluator import deterministic_policy
from surreal.algorithms.es.master import ESMaster
from surreal.algorithms.es.presets import preset_for


def train(cfg: ESConfig, env_id: str, steps: int, agents: int, seed: int, eval_every: int,
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1, help="worker processes to emulate")
    parser.add_argument("--eval-every", type=int, default=100_000)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    cfg = preset_for(args.env, args.agents)
    types = {f.name: str(f.type) for f in dataclasses.fields(cfg)}
    changes = {key: _parse(types[key], value) for key, value in (item.split("=", 1) for item in args.set)}
    cfg = dataclasses.replace(cfg, **changes)
    cfg.validate()
    train(cfg, args.env, args.steps, args.agents, args.seed, args.eval_every, args.workers)


def _parse(kind: str, text: str) -> Any:
    if "tuple" in kind:
        return tuple(int(v) for v in text.split(",") if v)
    if "bool" in kind:
        return text.lower() in ("1", "true", "yes")
    if "int" in kind:
        return int(text)
    return float(text) if "float" in kind else text


if __name__ == "__main__":
    main()

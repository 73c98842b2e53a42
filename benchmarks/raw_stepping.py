"""The raw-stepping baseline both throughput benchmarks compare against.

One process per core steps one env with random actions drawn up front, so the figure is the cost of
env.step() alone: no policy, no learning, and no `action_space.sample()` (which costs about half as
much as a HalfCheetah step and would flatter every ratio taken against it).
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import time

import numpy as np


def _worker(env_id: str, seconds: float, seed: int, out: mp.Queue) -> None:
    import gymnasium as gym

    env = gym.make(env_id, disable_env_checker=True)
    env.reset(seed=seed)
    space = env.action_space
    rng = np.random.default_rng(seed)
    if hasattr(space, "n"):
        actions = rng.integers(0, space.n, 1000)
    else:
        actions = rng.uniform(space.low, space.high, (1000, *space.shape)).astype(space.dtype)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for a in actions:
            _, _, terminated, truncated, _ = env.step(a)
            if terminated or truncated:
                env.reset()
        steps += len(actions)
    out.put(steps / (time.perf_counter() - start))


def raw_rate(env_id: str, cores: int, seconds: float = 10.0) -> float:
    """Env steps/s of `cores` processes, each stepping one `env_id` env with random actions."""
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(env_id, seconds, i, out)) for i in range(cores)]
    for p in procs:
        p.start()
    try:
        rates = [out.get(timeout=seconds + 120) for _ in procs]
    except queue.Empty:
        codes = [p.exitcode for p in procs]
        raise RuntimeError(f"raw stepping workers did not report (exit codes {codes})") from None
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return sum(rates)

"""What one actor process makes and one learner consumes, in env steps per second, measured on this
machine with the run's own code: Spreeze's lesson (size the samplers to what the update can use)
as a measurement, not a preset.

The actor's rate is its family's actor core (the one runtime/actor.py runs) collecting fragments of
its worker's environments with the initial policy: env steps, the policy's forward on the worker's
batch, the fragment's assembly. The learner's rate is one update of the run's own batch on rows
those environments made: an on-policy learner's batch of `steps_per_update` (valuing and GAE
included), an off-policy `update` of `batch_size` rows, which consumes batch_size / replay_ratio
env steps. Each is timed after one untimed call, and repeated while the budget lasts (the median
is kept); a call longer than the budget is timed once, as the first.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import psutil
import torch

from surreal.protocol.types import Fragment, Params
from surreal.runtime.envs.make import spaces_for
from surreal.runtime.envs.ref import EnvRef

if TYPE_CHECKING:
    from surreal.algorithms.api import OffPolicy, OnPolicy


@dataclasses.dataclass(frozen=True)
class Rates:
    actor_steps_per_second: float
    """Env steps per second of one actor process (one CPU) of `agents_in_worker` agents."""
    learner_steps_per_second: float
    """Env steps per second one learner (one rank) trains on, updating without pause."""
    agents_in_worker: int
    seconds: float
    """What measuring took."""
    actor_memory_mb: float = 0.0
    """What the actor's environments and buffers added to its process's resident memory."""

    def actor_cpus(self, learners: int = 1) -> float:
        """Actor CPUs that make what `learners` learner ranks consume."""
        return learners * self.learner_steps_per_second / self.actor_steps_per_second


def _resident_mb() -> float:
    return float(psutil.Process().memory_info().rss / 2**20)


def timed(fn: Callable[[], Any], budget: float) -> float:
    """Seconds per call of `fn`: one untimed call, then the median of calls while `budget` seconds
    last (at least one); a first call that takes the budget or more is the answer itself (it may
    include a first call's one-off costs: a slower measure, never a longer create)."""
    started = time.perf_counter()
    fn()
    if (first := time.perf_counter() - started) >= budget:
        return first
    times: list[float] = []
    deadline = time.perf_counter() + budget
    while not times or time.perf_counter() < deadline:
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def onpolicy(algo: OnPolicy, cfg: Any, env: EnvRef | str, agents_in_worker: int, budget: float = 1.0
             ) -> Rates:  # fmt: skip
    from surreal.runtime.onpolicy.actor import Actor
    from surreal.runtime.onpolicy.learner import Learner

    started, threads = time.perf_counter(), torch.get_num_threads()
    torch.set_num_threads(cfg.learner_threads)  # as the learner runs; the caller's, after
    learner = Learner(algo, cfg, spaces_for(env).keep(cfg.obs_keys), 10**15, seed=0)
    before = _resident_mb()
    actor = Actor(cfg, env, agents_in_worker * cfg.envs_per_agent, seed=0, algo=algo)
    try:
        actor.set_params(learner.params())
        fragment: dict[str, np.ndarray] = {}

        def collect() -> None:
            fragment.update(actor.collect())

        per_collect = timed(collect, budget)
        memory = _resident_mb() - before
        steps = cfg.fragment_length * actor.envs.num_envs

        def update() -> None:  # the run's batch, of this fragment over and over, on the current version
            while not learner.ready():
                learner.add_fragment(Fragment("calibration", learner.counters.version, fragment))
            learner.update()

        per_update = timed(update, budget)
        return Rates(steps / per_collect, cfg.steps_per_update / per_update, agents_in_worker,
                     time.perf_counter() - started, memory)  # fmt: skip
    finally:
        actor.close()
        learner.close()
        torch.set_num_threads(threads)


def offpolicy(algo: OffPolicy, cfg: Any, env: EnvRef | str, agents_in_worker: int, budget: float = 1.0
              ) -> Rates:  # fmt: skip
    from surreal.runtime.offpolicy import obs
    from surreal.runtime.offpolicy.actor import Actor

    started, threads = time.perf_counter(), torch.get_num_threads()
    torch.set_num_threads(cfg.learner_threads)  # as the learner runs; the caller's, after
    num_envs = agents_in_worker * cfg.envs_per_agent
    before = _resident_mb()
    actor = Actor(algo, cfg, env, num_envs, seed=0, random_steps=0, total_steps=10**15)
    try:
        torch.manual_seed(0)
        nets: Any = algo.make(cfg, actor.spaces)
        weights = {k: v.detach().numpy().copy() for k, v in nets.actor.state_dict().items()}
        actor.set_params(Params(0, weights, {}))
        rows: dict[str, np.ndarray] = {}

        def collect() -> None:
            rows.update(actor.collect())

        per_collect = timed(collect, budget)
        memory = _resident_mb() - before
        steps = cfg.fragment_length * num_envs
        fields = obs.transition_fields(actor.spaces)
        pick = np.arange(cfg.batch_size) % steps  # the run's batch, of this fragment's rows
        sample = {k: rows[k][pick] for k in fields}
        batch = {k: torch.from_numpy(v) for k, v in obs.batch(actor.spaces, sample).items()}
        per_update = timed(lambda: algo.update(nets, batch, cfg), budget)
        return Rates(steps / per_collect, cfg.batch_size / cfg.replay_ratio / per_update, agents_in_worker,
                     time.perf_counter() - started, memory)  # fmt: skip
    finally:
        actor.close()
        torch.set_num_threads(threads)

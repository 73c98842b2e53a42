"""How an experiment's agents are packed into actor workers (processes locally, pods in containers
and on Kubernetes), from what this machine measures at create (runtime/calibrate.py): Spreeze's
lesson, size the samplers to what the update can use, as a rule every backend applies.

The packing never changes what the algorithm learns from: `--agents` stays the number of
environment streams and the algorithm's settings are untouched. What follows from the rates is
`agents_per_pod` (agents in one actor worker, on every backend), how many workers (locally at most
one per core), each actor pod's CPU and memory, and `spec.sizing`, the spec's section that says
what was chosen and why (the dry run prints it, `surreal status` shows its line).

The rule: the fewest actor workers whose CPUs make what the learner ranks consume, each worker's
CPU request the share it needs (an actor pod asks for 300m when a third of a core keeps the learner
busy; its limit stays a core, so it starts and bursts as fast as a whole one). What
the user set (`--agents-per-pod`) wins; the measurement then only says how it compares.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from surreal.algorithms.registry import get_algorithm
from surreal.orchestrator import home
from surreal.orchestrator.files import write_json_atomic
from surreal.orchestrator.program import ACTOR_CPU, ACTOR_MEMORY_MB, cores, envs_problem, fragment_problem
from surreal.spec import ExperimentSpec

SKIP_VAR = "SURREAL_NO_CALIBRATE"  # create's --no-calibrate, as an environment variable (1, true)
BUDGET = 0.5  # seconds each part of a measurement is timed for
FIRST_PROBE = 32  # agents in the first worker measured
MEMORY_STEP_MB = 256


def machine() -> str:
    """This machine as its rates depend on it: its CPU model and the cores this process may use."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next(
                (line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model
            )
    except OSError:
        pass
    return f"{cores()} x {model}"


@dataclasses.dataclass(frozen=True)
class Measured:
    """What one measurement found (runtime/calibrate.Rates, as the cache keeps it)."""

    agents_in_worker: int
    actor_steps_per_second: float
    learner_steps_per_second: float
    actor_memory_mb: float
    seconds: float
    cached: bool = False


Measure = Callable[[int], Measured]  # agents in a worker -> what one actor and one learner do


def measurer(spec: ExperimentSpec, budget: float = BUDGET, cache: Path | None = None) -> Measure:
    """What measures `spec`'s algorithm on its environment here, keeping each result in `cache`
    (per environment, algorithm, settings and machine); it raises NotMeasurable for an algorithm
    whose calibrate says nothing."""
    algorithm = get_algorithm(spec.algo)
    cache = cache if cache is not None else home.home_dir() / "calibration"
    identity = {"algo": spec.algo, "env": spec.env, "env_kwargs": spec.env_kwargs,
                "config": dataclasses.asdict(spec.config), "machine": machine(), "budget": budget,
                "surreal": _version()}  # fmt: skip

    def measure(agents: int) -> Measured:
        key = json.dumps({**identity, "agents": agents}, sort_keys=True, default=str)
        path = cache / f"{hashlib.sha256(key.encode()).hexdigest()[:20]}.json"
        try:
            return dataclasses.replace(Measured(**json.loads(path.read_text())), seconds=0.0, cached=True)
        except (OSError, ValueError, TypeError):
            pass
        rates = algorithm.calibrate(spec.config, spec.env_ref, agents, budget)
        if rates is None:
            raise NotMeasurable
        found = Measured(agents, rates.actor_steps_per_second, rates.learner_steps_per_second,
                         rates.actor_memory_mb, rates.seconds)  # fmt: skip
        try:
            cache.mkdir(parents=True, exist_ok=True)
            write_json_atomic(path, dataclasses.asdict(found))
        except OSError:  # a cache that cannot be written only costs the next create its seconds
            pass
        return found

    return measure


class NotMeasurable(Exception):
    """The algorithm's calibrate says it cannot measure (returns None)."""


def _version() -> str:
    from surreal import __version__

    return __version__


@dataclasses.dataclass(frozen=True)
class Packing:
    workers: int
    agents_per_worker: int
    actor_cpu: float
    actor_memory_mb: int


def largest_worker(spec: ExperimentSpec) -> int:
    """The most agents one worker may hold: its environments stepped in a useful time and its
    fragments under the protocol's message limit (program.envs_problem, fragment_problem)."""
    low, high = 1, spec.agents
    while low < high:  # both problems only grow with a worker's agents
        mid = (low + high + 1) // 2
        if envs_problem(spec, [mid], "") or fragment_problem(spec, [mid], ""):
            high = mid - 1
        else:
            low = mid
    return low


def workers_for(spec: ExperimentSpec, wanted: int, most_per_worker: int) -> int:
    """Actor workers for `spec` nearest above `wanted`: one per learner rank at least, at most one
    per agent; locally at most one per core; in pods a divisor of the agents (one pod template)."""
    n = max(wanted, spec.learners, math.ceil(spec.agents / most_per_worker))
    if spec.backend == "local":
        return max(spec.learners, min(n, spec.agents, cores()))
    n = min(n, spec.agents)
    while spec.agents % n:
        n += 1
    return n


def pack(spec: ExperimentSpec, workers: int, actor_cpus: float | None, memory_mb: float) -> Packing:
    per_worker = math.ceil(spec.agents / workers)
    cpu = ACTOR_CPU
    if actor_cpus is not None and spec.backend != "local":  # a process locally: it takes what it takes
        # Its share, to Kubernetes' precision (1m); its limit stays a core (program.ACTOR_CPU), so a
        # small share only sets what the scheduler reserves, never how fast it starts or bursts.
        cpu = min(ACTOR_CPU, max(1, math.ceil(round(actor_cpus / workers * 1000, 6))) / 1000)
    memory = ACTOR_MEMORY_MB + MEMORY_STEP_MB * math.ceil(max(0.0, memory_mb) / MEMORY_STEP_MB)
    return Packing(workers, per_worker, round(cpu, 3), memory)


def choose(spec: ExperimentSpec, measure: Measure) -> tuple[Packing, Measured, float]:
    """The packing of `spec` from `measure`, the measurement it rests on, and the actor CPUs the
    learner ranks consume. Measured at FIRST_PROBE agents a worker, and again where the packing
    that implies has smaller workers (slower per CPU: smaller batches)."""
    most = largest_worker(spec)
    probe = min(FIRST_PROBE, most, max(1, spec.agents // spec.learners))
    found = measure(probe)

    def packed(found: Measured) -> tuple[float, int, int]:
        need = spec.learners * found.learner_steps_per_second / found.actor_steps_per_second
        workers = workers_for(spec, math.ceil(need), most)
        return need, workers, math.ceil(spec.agents / workers)

    need, workers, per_worker = packed(found)
    if per_worker < probe:
        again = measure(per_worker)
        found = dataclasses.replace(again, learner_steps_per_second=found.learner_steps_per_second)
        need, workers, per_worker = packed(found)
    memory = found.actor_memory_mb * per_worker / found.agents_in_worker
    return pack(spec, workers, need, memory), found, need


def size(spec: ExperimentSpec, measure: Measure | None, say: Callable[[str], None] = lambda _: None
         ) -> ExperimentSpec:  # fmt: skip
    """`spec` packed: `agents_per_pod` and `sizing` filled from `measure` (None: not measured, the
    packing stays the user's or one agent a worker). A spec whose packing the user set keeps it;
    the measurement then only reports how it compares. The learner's threads stay the preset's or
    the user's: measured alone, a second thread sped CartPole's update but slowed the run beside
    its actor (benchmarks/sizing_grid.py)."""
    by_user = spec.sizing is not None and spec.sizing.get("by") == "you"
    found: Measured | None = None
    need = 0.0
    packing: Packing | None = None
    if measure is not None:
        say(f"measuring what one actor and one learner of {spec.algo} do on {spec.env} here "
            f"(a few seconds; --no-calibrate skips)")  # fmt: skip
        started = time.perf_counter()
        try:
            if by_user:
                found = measure(min(spec.agents_per_pod, largest_worker(spec)))
                need = spec.learners * found.learner_steps_per_second / found.actor_steps_per_second
            else:
                packing, found, need = choose(spec, measure)
        except NotMeasurable:
            found = None
        except Exception as exc:  # the run's own roles will meet it again, and say so where it is
            say(f"the measurement failed ({type(exc).__name__}: {' '.join(str(exc).split())[:200]}); "
                "packing as when not measured")  # fmt: skip
            found = None
        else:
            found = dataclasses.replace(found, seconds=round(time.perf_counter() - started, 2))
    agents_per_pod = spec.agents_per_pod if packing is None else packing.agents_per_worker
    if packing is None:  # the user's packing, or one agent a worker (locally, a process a core at most:
        # the section says what each process hosts, and the spec keeps the packing `surreal scale` splits by)
        workers = workers_for(spec, math.ceil(spec.agents / spec.agents_per_pod), spec.agents)
        per = math.ceil(spec.agents / workers) if spec.backend == "local" else spec.agents_per_pod
        memory = 0.0 if found is None else found.actor_memory_mb * per / found.agents_in_worker
        packing = dataclasses.replace(pack(spec, workers, None, memory), agents_per_worker=per)
    sizing: dict[str, Any] = {
        "by": "you" if by_user else "calibration" if found is not None else "default",
        "workers": packing.workers,
        "agents_per_worker": packing.agents_per_worker,
        "actor_cpu": packing.actor_cpu,
        "actor_memory_mb": packing.actor_memory_mb,
        "learner_threads": int(getattr(spec.config, "learner_threads", 1)),
    }
    if found is not None:
        sizing.update({
            "actor_steps_per_second": round(found.actor_steps_per_second),
            "learner_steps_per_second": round(found.learner_steps_per_second),
            "actor_cpus_needed": round(need, 4),
            "measured_agents_in_worker": found.agents_in_worker,
            "measured_on": machine(),
            "calibration_seconds": found.seconds,
            "cached": found.cached,
        })  # fmt: skip
    sizing["why"] = why(spec, sizing)
    return dataclasses.replace(spec, agents_per_pod=agents_per_pod, sizing=sizing)


def why(spec: ExperimentSpec, sizing: dict[str, Any]) -> str:
    """The sizing's line: what was chosen, and the rates it rests on."""
    n, per = sizing["workers"], sizing["agents_per_worker"]
    unit = (
        ("process" if n == 1 else "processes") if spec.backend == "local" else ("pod" if n == 1 else "pods")
    )
    cpu = "" if spec.backend == "local" else f" at {sizing['actor_cpu']:g} CPU"
    chosen = f"{n} actor {unit} x {per} agent{'s' if per != 1 else ''}{cpu}"
    if "learner_steps_per_second" not in sizing:
        if sizing["by"] == "you":
            return f"{chosen}: set by you"
        return f"{chosen}: not measured ({spec.algo} has no calibration, or it was skipped)"
    learner = "one learner" if spec.learners == 1 else f"{spec.learners} learner ranks, each,"
    rates = (f"{learner} consumes ~{sizing['learner_steps_per_second']:,} env steps/s; one actor CPU makes "
             f"~{sizing['actor_steps_per_second']:,} with {sizing['measured_agents_in_worker']} agents: "
             f"~{sizing['actor_cpus_needed']:.2g} actor CPUs keep the learner busy")  # fmt: skip
    if spec.backend == "local" and n < math.ceil(sizing["actor_cpus_needed"]):
        rates += f" (this machine has {cores()} cores)"
    return f"{chosen}{', set by you' if sizing['by'] == 'you' else ''}: {rates}"

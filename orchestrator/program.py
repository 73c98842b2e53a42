"""The program of an experiment: `make_program(spec)` builds it as role groups of components, the same
for every backend. A `Program` is plain data that round-trips through JSON (a detached supervisor
loads exp_dir/program.json). Pure: a launcher decides how to pack the agents into workers
(`local_split`, `pod_split`) and how to run the components; what each one runs and which variables
it reads come from here.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from surreal.algorithms.api import OffPolicy
from surreal.algorithms.registry import get_algorithm
from surreal.protocol.options import MAX_MESSAGE_BYTES
from surreal.runtime import bounds
from surreal.runtime.envs.ref import IMPORT_PATH_VAR
from surreal.runtime.run import ENV_CONTROL, ENV_POD, ENV_PODS
from surreal.spec import ExperimentSpec

# Component names become file names (logs/<name>.log) and Kubernetes name parts.
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

LEARNER_ROLE = "learner"
ACTOR_ROLE = "actor"
EVALUATOR_ROLE = "evaluator"
REPLAY_ROLE = "replay"


class FrozenEnv(Mapping[str, str]):
    """An immutable, hashable str -> str mapping (environment variables of a component)."""

    __slots__ = ("_data", "_key")

    def __init__(self, items: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> None:
        data = dict(items)
        for key, value in data.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"environment entries must be str -> str, got {key!r}: {value!r}")
        self._data = data
        self._key = tuple(sorted(data.items()))

    def __getitem__(self, key: str) -> str:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __eq__(self, other: object) -> bool:
        # Two FrozenEnvs compare their dicts directly (Mapping's __eq__ would copy both first):
        # render compares every actor's env with the first one's.
        if isinstance(other, FrozenEnv):
            return self._data == other._data
        return super().__eq__(other)

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        return f"FrozenEnv({dict(self._key)!r})"


@dataclass(frozen=True)
class Component:
    """One process of an experiment, described independently of the backend that runs it."""

    # Unique within the program; used for log file names and `surreal logs NAME COMPONENT`.
    name: str
    # What it does: "learner", "actor", "evaluator", "tensorboard", ... The local supervisor treats
    # "learner" specially: its clean exit (code 0) ends the experiment as Succeeded.
    role: str
    # Full command line; argv[0] is resolved through PATH. Any sequence is stored as a tuple.
    argv: tuple[str, ...]
    # Extra environment variables, layered over the launcher's own environment.
    env: Mapping[str, str] = field(default_factory=FrozenEnv)
    # Restart the process when it crashes (non-zero exit or killed by a signal).
    restart: bool = True
    # Worker index among components of the same role (actor 0, 1, ...).
    index: int = 0
    # CPU cores requested (Kubernetes requests; informational locally).
    cpu: float = 1.0
    # The most CPU cores it may use (Kubernetes and container limits); None: `cpu`, requests = limits.
    cpu_limit: float | None = None
    # Memory requested, in MiB (Kubernetes requests/limits; informational locally).
    memory_mb: int = 512
    # TCP port the component listens on, if any (a Service port on Kubernetes).
    port: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "argv", tuple(self.argv))
        object.__setattr__(self, "env", FrozenEnv(self.env))
        if not _NAME_RE.match(self.name):
            raise ValueError(f"invalid component name {self.name!r} (letters, digits, '_.-')")
        if not self.role:
            raise ValueError(f"component {self.name!r} has an empty role")
        if not self.argv or not all(isinstance(a, str) for a in self.argv):
            raise ValueError(f"component {self.name!r} needs a non-empty argv of strings")
        if self.index < 0 or self.cpu <= 0 or self.memory_mb <= 0:
            raise ValueError(f"component {self.name!r}: index >= 0, cpu > 0, memory_mb > 0")
        if self.cpu_limit is not None and self.cpu_limit < self.cpu:
            raise ValueError(f"component {self.name!r}: cpu_limit {self.cpu_limit} under cpu {self.cpu}")
        if self.port is not None and not 0 < self.port < 65536:
            raise ValueError(f"component {self.name!r}: port {self.port} out of range")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict; `Component.from_dict` inverts it."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {**data, "argv": list(self.argv), "env": dict(sorted(self.env.items()))}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Component:
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown component fields: {sorted(unknown)}")
        return cls(**data)


def duplicate_names(names: Iterable[str]) -> list[str]:
    """The names that occur more than once, sorted; one pass with a set (linear, whatever the count)."""
    seen: set[str] = set()
    duplicates: set[str] = set()
    for name in names:
        if name in seen:
            duplicates.add(name)
        else:
            seen.add(name)
    return sorted(duplicates)


@dataclass(frozen=True)
class Program:
    """Every component of one experiment."""

    # Experiment name (a valid Kubernetes name; checked by the spec layer).
    experiment: str
    # The components, in start order.
    components: tuple[Component, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "components", tuple(self.components))
        duplicates = duplicate_names(c.name for c in self.components)
        if duplicates:
            raise ValueError(f"duplicate component names: {duplicates}")
        if sum(c.role == LEARNER_ROLE for c in self.components) > 1:
            raise ValueError("a program has at most one learner")

    def group(self, role: str) -> list[Component]:
        """The components of one role (a role group: actor workers, ...), by index."""
        return sorted((c for c in self.components if c.role == role), key=lambda c: c.index)

    def component(self, name: str) -> Component:
        for c in self.components:
            if c.name == name:
                return c
        raise KeyError(f"no component named {name!r} in {self.experiment!r}")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict; `Program.from_dict` inverts it."""
        return {
            "experiment": self.experiment,
            "components": [c.to_dict() for c in self.components],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Program:
        return cls(
            experiment=data["experiment"],
            components=tuple(Component.from_dict(c) for c in data["components"]),
        )


# Environment variables a component reads (kept here so launchers and the entry point agree).
ENV_LEARNER_ADDR = "SURREAL_LEARNER_ADDR"
ENV_REPLAY_ADDR = "SURREAL_REPLAY_ADDR"  # of each replay shard, comma-separated, by index
ENV_BIND_HOST = "SURREAL_BIND_HOST"
ENV_TOKEN = "SURREAL_TOKEN"
ENV_TOKEN_FILE = "SURREAL_TOKEN_FILE"
ENV_EXP_DIR = "SURREAL_EXP_DIR"
ENV_AGENTS_IN_WORKER = "SURREAL_AGENTS_IN_WORKER"
# An Indexed Job gives each of its pods its index in this variable (Kubernetes sets it; the
# containers backend too): actor pods take it as their worker index (surreal.component).
ENV_JOB_INDEX = "JOB_COMPLETION_INDEX"
# Ranks across learner pods (ranks.py): how many, pod 0's control store, a Job's first pod.
ENV_LEARNER_PODS, ENV_RANKS_CONTROL, ENV_FIRST_LEARNER_POD = ENV_PODS, ENV_CONTROL, ENV_POD
# Where a finished learner writes its final status: the container's termination message in a pod.
ENV_TERMINATION_LOG = "SURREAL_TERMINATION_LOG"
# "BACKEND:WHERE": the watch of the experiment's Jobs its backend gives each component
# (launcher.start_jobs_watch: a learner whose actors' Job failed, workers whose learner's Job ended,
# stop). Kubernetes' ("kube:NAMESPACE/EXPERIMENT[/jobset]", its Jobs through the API) is the only
# one: the local supervisor and the containers controller end their components themselves.
ENV_JOBS_WATCH = "SURREAL_JOBS_WATCH"
ENV_IMPORT_PATH = IMPORT_PATH_VAR  # folders a component imports a user's environment module from

LEARNER_PORT = 6000  # rank 0's in a pod (rank r listens on LEARNER_PORT + r); locally free ports
# A learner's memory: one rank's, and each further rank's (its own network, optimizer and batch).
LEARNER_MEMORY_MB = bounds.LEARNER_MEMORY_MB
# An actor pod's most CPU (one process: its steps, forwards and sends are one thread's) and its
# memory of one agent; the sizing asks for the share the learner needs (sizing.py).
ACTOR_CPU, ACTOR_MEMORY_MB = 1.0, 1024


@dataclass(frozen=True)
class Target:
    """How the launcher reaches things: where the spec is, how to start `surreal`, the learner's address."""

    spec_path: str
    learner_addr: str  # of each learner rank, comma-separated
    bind_host: str  # where the learner listens: 127.0.0.1 locally, 0.0.0.0 inside a pod
    exp_dir: str
    command: tuple[str, ...] = ("surreal",)
    token_file: str | None = None  # locally the token is read from a 0600 file, never put in argv/env
    # Locally: where the creating shell imported from (its PYTHONPATH, then its working directory),
    # so components find a user's environment module as `surreal create` did. In a pod: the image.
    import_path: tuple[str, ...] = ()
    # Pods: the file the learner's final status goes to (its container's termination message).
    termination_log: str | None = None
    # ENV_JOBS_WATCH's value, where the backend gives its components a watch of the Jobs.
    jobs_watch: str | None = None
    # Pods the learner ranks spread over (ranks.py): learner_addr lists every pod's ranks, pod by
    # pod; `ranks_control` is pod 0's control store ("HOST:PORT") when there are several.
    learner_pods: int = 1
    ranks_control: str = ""
    # An off-policy run's replay shards: each one's "host:port", comma-separated, by index.
    replay_addr: str = ""


def cores() -> int:
    """The cores this process may run on (its affinity, where the OS says)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def local_split(agents: int, cpus: int | None = None, learners: int = 1, per_worker: int = 1) -> list[int]:
    """Agents per local actor process: `per_worker` each (the sizing's, sizing.py), but at most one
    process per core (more is slower, not faster) and one per learner rank at least (each rank
    serves workers index % learners), the agents spread as evenly as possible (the first ones get
    one more)."""
    wanted = math.ceil(agents / max(1, per_worker))
    workers = max(1, min(agents, max(learners, min(wanted, cpus or cores()))))
    base, extra = divmod(agents, workers)
    return [base + (1 if i < extra else 0) for i in range(workers)]


def pod_split(agents: int, agents_per_pod: int) -> list[int]:
    """Agents per actor pod: `agents_per_pod` each (one pod template serves them all)."""
    return [agents_per_pod] * math.ceil(agents / agents_per_pod)


def ranks_problem(learners: int, workers: int, unit: str) -> str | None:
    """Why `workers` actor workers (processes, pods: `unit`) cannot feed `learners` learner ranks
    (a rank serves the workers whose index modulo `learners` is its rank), or None."""
    if workers >= learners:
        return None
    return (f"{learners} learner ranks need an actor {unit} each, and there would be {workers} "
            f"(every rank serves actors of its own)")  # fmt: skip


def fragment_problem(spec: ExperimentSpec, split: Sequence[int], knob: str) -> str | None:
    """Why the workers of `split` could not send their experience (a fragment over the protocol's
    message limit), or None. `knob`: how the user lowers the agents of one worker on this backend."""
    if spec.resolved is None or not split:
        return None
    size = get_algorithm(spec.algo).fragment_bytes(spec.config, spec.resolved, max(split))
    if size <= MAX_MESSAGE_BYTES:
        return None
    agents = f"{max(split)} agent{'s' if max(split) > 1 else ''}"
    return (
        f"a worker of {agents} would send fragments of {size / 2**20:.0f} MiB, over the "
        f"{MAX_MESSAGE_BYTES // 2**20} MiB message limit: lower {spec.algo}.fragment_length "
        f"({spec.config.fragment_length}) or {spec.algo}.envs_per_agent ({spec.config.envs_per_agent}), "
        f"or {knob}"
    )


LOCAL_KNOB = "--agents (this machine runs one actor process per core)"


def envs_problem(spec: ExperimentSpec, split: Sequence[int], knob: str) -> str | None:
    """Why a worker of `split`'s agents could not step its environments in a useful time (more
    than bounds.MAX_WORKER_ENVS, one after another on one core), or None."""
    agents = max(split, default=0)
    envs = get_algorithm(spec.algo).worker_envs(spec.config, agents)
    if envs <= bounds.MAX_WORKER_ENVS:
        return None
    per_agent = envs // max(agents, 1)
    fewer = f"{spec.algo}.envs_per_agent ({per_agent}) or " if per_agent > 1 else ""
    return (f"a worker of {max(split):,} agents would step {envs:,} environments, over the "
            f"{bounds.MAX_WORKER_ENVS:,} one process steps in a useful time: lower "
            f"{fewer}{knob}")  # fmt: skip


def workers_problem(spec: ExperimentSpec, split: Sequence[int], unit: str, knob: str) -> str | None:
    """Why actor workers of `split` agents each (processes or pods: `unit`) cannot run `spec`, or
    None: what create and scale both ask, so a scale is refused exactly where a create would be."""
    return (ranks_problem(spec.learners, len(split), unit) or envs_problem(spec, split, knob)
            or fragment_problem(spec, split, knob))  # fmt: skip


def make_program(spec: ExperimentSpec, target: Target, split: Sequence[int]) -> Program:
    """The learner, one actor worker per entry of `split` (its agents), and the evaluator."""
    common = {ENV_LEARNER_ADDR: target.learner_addr, ENV_EXP_DIR: target.exp_dir}
    if target.replay_addr:
        common[ENV_REPLAY_ADDR] = target.replay_addr
    if target.token_file:
        common[ENV_TOKEN_FILE] = target.token_file
    if target.import_path:
        common[ENV_IMPORT_PATH] = os.pathsep.join(target.import_path)
    if target.jobs_watch:
        common[ENV_JOBS_WATCH] = target.jobs_watch

    def component(role: str, env: Mapping[str, str], **size: Any) -> Component:
        argv = (*target.command, "component", role, "--spec", target.spec_path, "--index", "0")
        return Component(name=role, role=role, argv=argv, env={**common, **env}, **size)

    ranks = len(learner_ports(target.learner_addr)) // target.learner_pods  # in one learner pod
    learner_env = {ENV_BIND_HOST: target.bind_host}
    if target.termination_log:
        learner_env[ENV_TERMINATION_LOG] = target.termination_log
    if target.learner_pods > 1:
        learner_env[ENV_LEARNER_PODS] = str(target.learner_pods)
        learner_env[ENV_RANKS_CONTROL] = target.ranks_control
    # Learner ranks run side by side (in one pod on a cluster): a core and a learner's memory each.
    learner = component("learner", learner_env, cpu=float(ranks), memory_mb=LEARNER_MEMORY_MB * ranks,
                        port=learner_ports(target.learner_addr)[0])  # fmt: skip
    evaluator = component("evaluator", {}, cpu=0.5, memory_mb=1024)
    sizing = spec.sizing or {}  # an actor pod's CPU and memory, as the sizing chose (sizing.py)
    cpu = float(sizing.get("actor_cpu", ACTOR_CPU))
    template = component(
        "actor",
        {},
        cpu=cpu,
        cpu_limit=max(cpu, ACTOR_CPU),  # a spec file's sizing may ask for more than the sizing would
        memory_mb=int(sizing.get("actor_memory_mb", ACTOR_MEMORY_MB)),
    )  # actor_group names each worker
    shards = []
    if target.replay_addr:  # an off-policy algorithm's replay shards, each on its port
        shard = component(
            REPLAY_ROLE, {ENV_BIND_HOST: target.bind_host}, cpu=0.5, memory_mb=replay_memory_mb(spec)
        )
        shards = replay_group(shard, target.replay_addr)
    return Program(experiment=spec.name,
                   components=(learner, *shards, *actor_group(template, split), evaluator))  # fmt: skip


def replay_shards(spec: ExperimentSpec) -> int:
    """The replay shards `spec` runs: its replay_shards for an algorithm with replay, else none."""
    return spec.replay_shards if REPLAY_ROLE in get_algorithm(spec.algo).roles else 0


SHARD_FALLBACK_MB = 512  # a shard's memory while its spec's env is not resolved (nothing sized yet)


def replay_memory_mb(spec: ExperimentSpec) -> int:
    """One replay shard's memory (its share of the transitions), once the spec's env is resolved."""
    algorithm = get_algorithm(spec.algo)
    if spec.resolved is None or not isinstance(algorithm, OffPolicy):
        return SHARD_FALLBACK_MB
    return algorithm.shard_memory_mb(spec.config, spec.resolved, spec.replay_shards)


def replay_group(template: Component, replay_addr: str) -> list[Component]:
    """One replay shard per address of `replay_addr` (none without), each listening on its port."""
    addrs = [a for a in replay_addr.split(",") if a]
    return [dataclasses.replace(template, name=f"replay-{i}", index=i, argv=(*template.argv[:-1], str(i)),
                                port=int(addr.rsplit(":", 1)[1]))
            for i, addr in enumerate(addrs)]  # fmt: skip


def learner_ports(learner_addr: str) -> tuple[int, ...]:
    """The port of each learner rank, by rank, from a learner address ("host:port", comma-separated
    for ranks)."""
    return tuple(int(addr.rsplit(":", 1)[1]) for addr in learner_addr.split(","))


def rank_addrs(host: str, first_port: int, learners: int) -> str:
    """The learner address of `learners` ranks that listen on `host`, rank r on `first_port` + r."""
    return ",".join(f"{host}:{first_port + rank}" for rank in range(learners))


def actor_group(template: Component, split: Sequence[int]) -> list[Component]:
    """One actor worker per entry of `split`, each `template` with its index and agent count."""
    if not split or min(split) < 1:
        raise ValueError(f"every actor worker hosts at least one agent, got {list(split)}")
    out = []
    for i, agents in enumerate(split):
        argv = (*template.argv[:-1], str(i))  # the template ends with "--index N"
        env = {**template.env, ENV_AGENTS_IN_WORKER: str(agents)}
        out.append(dataclasses.replace(template, name=f"actor-{i}", index=i, argv=argv, env=env))
    return out


def rescaled(program: Program, split: Sequence[int]) -> Program:
    """`program` with its actor group repacked as `split`; the learner and evaluator unchanged, so
    a supervisor that compares the two restarts only the actors whose command changed."""
    actors = program.group(ACTOR_ROLE)
    if not actors:
        raise ValueError(f"program {program.experiment!r} has no actor to scale")
    learner = [c for c in program.components if c.role == LEARNER_ROLE]
    rest = [c for c in program.components if c.role not in (ACTOR_ROLE, LEARNER_ROLE)]
    return Program(program.experiment, (*learner, *actor_group(actors[0], split), *rest))

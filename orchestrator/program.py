"""make_program(spec): the experiment as a graph of components, the same for every backend.

Pure: no file, process or network is touched. A launcher decides only how to run the components
(subprocesses, Kubernetes objects); what each one runs — the one entry point
`surreal component ROLE --spec FILE --index I` — and which variables it reads come from here.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from surreal.algorithms.common.env_ref import IMPORT_PATH_VAR
from surreal.orchestrator.components import Component, Program
from surreal.spec import ExperimentSpec

# Environment variables a component reads (kept here so launchers and the entry point agree).
ENV_LEARNER_ADDR = "SURREAL_LEARNER_ADDR"
ENV_BIND_HOST = "SURREAL_BIND_HOST"
ENV_TOKEN = "SURREAL_TOKEN"
ENV_TOKEN_FILE = "SURREAL_TOKEN_FILE"
ENV_EXP_DIR = "SURREAL_EXP_DIR"
ENV_AGENTS_IN_WORKER = "SURREAL_AGENTS_IN_WORKER"
ENV_WORKERS = "SURREAL_WORKERS"
ENV_LINGER = "SURREAL_LINGER"  # "1": a finished component idles until stopped (pods; see component.py)
ENV_POD_NAME = "SURREAL_POD_NAME"  # set in Kubernetes pods (downward API); see surreal.component
ENV_IMPORT_PATH = IMPORT_PATH_VAR  # folders a component imports a user's environment module from

LEARNER_PORT = 6000  # in a pod; locally a free port is chosen at create time


@dataclass(frozen=True)
class Target:
    """How the launcher reaches things: where the spec is, how to start `surreal`, the learner's address."""

    spec_path: str
    learner_addr: str
    bind_host: str  # where the learner listens: 127.0.0.1 locally, 0.0.0.0 inside a pod
    exp_dir: str
    command: tuple[str, ...] = ("surreal",)
    token_file: str | None = None  # locally the token is read from a 0600 file, never put in argv/env
    # Locally: where the creating shell imported from (its PYTHONPATH, then its working directory),
    # so components find a user's environment module as `surreal create` did. In a pod: the image.
    import_path: tuple[str, ...] = ()


def worker_count(spec: ExperimentSpec, cpus: int | None = None) -> int:
    """Actor worker processes: locally at most one per core (more is slower); on Kubernetes one pod
    per `agents_per_pod` agents."""
    if spec.backend == "kube":
        return math.ceil(spec.agents / spec.agents_per_pod)
    return max(1, min(spec.agents, cpus or os.cpu_count() or 1))


def agents_per_worker(agents: int, workers: int) -> list[int]:
    """Split `agents` logical agents over `workers` as evenly as possible (the first ones get one more)."""
    base, extra = divmod(agents, workers)
    return [base + (1 if i < extra else 0) for i in range(workers)]


def make_program(spec: ExperimentSpec, target: Target, cpus: int | None = None) -> Program:
    workers = worker_count(spec, cpus)
    if spec.backend == "kube":
        split = [spec.agents_per_pod] * workers
    else:
        split = agents_per_worker(spec.agents, workers)
    common = {ENV_LEARNER_ADDR: target.learner_addr, ENV_EXP_DIR: target.exp_dir, ENV_WORKERS: str(workers)}
    if target.token_file:
        common[ENV_TOKEN_FILE] = target.token_file
    if target.import_path:
        common[ENV_IMPORT_PATH] = os.pathsep.join(target.import_path)
    if spec.backend == "kube":
        # Kubernetes restarts a container that exits, even with code 0 (StatefulSets and
        # Deployments have restartPolicy Always), so a finished component idles until deleted.
        common[ENV_LINGER] = "1"

    def component(role: str, index: int = 0, **extra: object) -> Component:
        name = role if role in ("learner", "evaluator") else f"{role}-{index}"
        argv = (*target.command, "component", role, "--spec", target.spec_path, "--index", str(index))
        env = dict(common)
        env.update({k: str(v) for k, v in extra.pop("env", {}).items()})  # type: ignore[attr-defined]
        return Component(name=name, role=role, argv=argv, env=env, index=index, **extra)  # type: ignore[arg-type]

    port = int(target.learner_addr.rsplit(":", 1)[1])
    components = [
        component("learner", env={ENV_BIND_HOST: target.bind_host}, cpu=1.0, memory_mb=2048, port=port),
        *(
            component("actor", i, env={ENV_AGENTS_IN_WORKER: n}, cpu=1.0, memory_mb=1024)
            for i, n in enumerate(split)
        ),
        component("evaluator", cpu=0.5, memory_mb=1024),
    ]
    return Program(experiment=spec.name, components=tuple(components))

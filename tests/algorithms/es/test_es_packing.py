"""`--agents 512` for ES: packed into at most one worker per core, every agent once."""

from __future__ import annotations

import os

import pytest

from surreal.orchestrator.program import ENV_AGENTS_IN_WORKER, Target, local_split, make_program, pod_split
from surreal.runtime.es.actor import agent_ids
from surreal.runtime.serving import max_streams
from surreal.spec import build_spec

TARGET = Target(spec_path="/x/spec.yaml", learner_addr="127.0.0.1:7000", bind_host="127.0.0.1",
                exp_dir="/x")  # fmt: skip


def actors(program):
    return [c for c in program.components if c.role == "actor"]


@pytest.mark.parametrize("cpus", [None, 1, 2, 3, 64])
def test_512_agents_locally_fill_at_most_one_worker_per_core(cpus):
    spec = build_spec("es512", flags={"algo": "es", "agents": 512})
    workers = actors(make_program(spec, TARGET, local_split(spec.agents, cpus)))
    assert 1 <= len(workers) <= (cpus or os.cpu_count() or 1)
    ids = [i for w in workers for i in agent_ids(w.index, int(w.env[ENV_AGENTS_IN_WORKER]))]
    assert len(ids) == len(set(ids)) == 512
    assert max_streams(spec.agents) >= len(workers)


def test_512_agents_on_kubernetes_fill_pods_of_agents_per_pod():
    spec = build_spec("es512", flags={"algo": "es", "agents": 512, "backend": "kube",
                                      "agents_per_pod": 8})  # fmt: skip
    workers = actors(make_program(spec, TARGET, pod_split(spec.agents, spec.agents_per_pod)))
    assert len(workers) == 64 and {w.env[ENV_AGENTS_IN_WORKER] for w in workers} == {"8"}
    assert max_streams(spec.agents) >= len(workers)

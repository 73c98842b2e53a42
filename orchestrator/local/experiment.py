"""Experiment lifecycle on the local backend: create, status, delete. An experiment's folder
(home.py) holds a token (0600), program.json and the supervisor's state.json besides the rest."""

from __future__ import annotations

import random
import secrets
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from surreal.orchestrator.home import (
    SPEC_FILE,
    TOKEN_FILE,
    CreateRefused,
    create_dir,
    existing_dir,
    experiment_dir,
    read_metrics,
    read_spec,
    remove_dir,
    stop_strays,
    user_import_path,
)
from surreal.orchestrator.launcher import CorruptFile
from surreal.orchestrator.local import processes as local
from surreal.orchestrator.local.sched_slice import slice_ms_from_env
from surreal.orchestrator.program import (
    LOCAL_KNOB,
    Program,
    Target,
    local_split,
    make_program,
    replay_shards,
    workers_problem,
)
from surreal.orchestrator.status import component, describe_exit, exit_code, status_object
from surreal.runtime.scale import read_scale
from surreal.spec import ExperimentSpec

LOW_PORT = 10_000  # the lowest port a local learner listens on


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now on `host`, below the kernel's ephemeral range where there is room: a port
    the kernel hands out (bind to 0) is also every outgoing connection's source port, so between
    create and the learner's bind any process's connect could take it (seen in CI: a rank's bind
    failed, "Address already in use"); one below the range is taken only by a bind to it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32_768  # Linux's default; elsewhere a port of that range does as well
    for _ in range(100 if ephemeral > LOW_PORT + 1000 else 0):
        with socket.socket() as sock:
            try:
                sock.bind((host, random.randrange(LOW_PORT, ephemeral)))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free now on 127.0.0.1."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def checked_split(spec: ExperimentSpec) -> list[int]:
    """The agents of each local actor process, refused (CreateRefused) where they could not run."""
    split = local_split(spec.agents, learners=spec.learners, per_worker=spec.agents_per_pod)
    problem = workers_problem(spec, split, "process", LOCAL_KNOB)
    if problem is not None:
        raise CreateRefused(problem)
    return split


def prepare(spec: ExperimentSpec, home: Path) -> tuple[Path, Program]:
    """Create the experiment directory with everything needed to run it; return it and the program."""
    final = experiment_dir(home, spec.name)
    try:
        slice_ms_from_env()  # read again by the supervisor; refuse a bad value before creating
    except ValueError as exc:
        raise CreateRefused(str(exc)) from None
    shards = replay_shards(spec)
    ports = free_ports(spec.learners + shards)
    target = Target(
        spec_path=str(final / SPEC_FILE),
        learner_addr=",".join(f"127.0.0.1:{port}" for port in ports[: spec.learners]),
        replay_addr=",".join(f"127.0.0.1:{port}" for port in ports[spec.learners :]),
        bind_host="127.0.0.1",
        exp_dir=str(final),
        command=(sys.executable, "-m", "surreal"),
        token_file=str(final / TOKEN_FILE),
        import_path=user_import_path(),
    )
    program = make_program(spec, target, checked_split(spec))

    def write(staging: Path) -> None:
        token_path = staging / TOKEN_FILE
        token_path.touch(mode=0o600)
        token_path.write_text(secrets.token_urlsafe(32))
        local.save_program(program, staging)

    return create_dir(spec, home, write), program


def run_foreground(exp_dir: Path, program: Program, on_tick: Callable[[], None] | None) -> int:
    supervisor = local.Supervisor(program, exp_dir)
    return exit_code(supervisor.run(on_tick=on_tick))


def run_detached(exp_dir: Path) -> int:
    return local.spawn_detached(exp_dir)


def status(exp_dir: Path) -> dict[str, Any]:
    """The status contract's object (status.py) for the local experiment in `exp_dir`."""
    spec = read_spec(exp_dir)
    state = local.read_state(exp_dir)
    rows = [
        component(
            c["name"],
            c["role"],
            c["state"],
            c["restarts"],
            describe_exit(c["exit_code"]) if c.get("exit_code") not in (None, 0) else "",
        )  # fmt: skip
        for c in (state or {}).get("components", [])
    ]
    return status_object(
        spec,
        backend=str(spec.get("backend", "local")),
        phase=local.current_phase(state),
        metrics=read_metrics(exp_dir),
        components=rows,
        agents=read_scale(exp_dir) or spec.get("agents"),  # as last scaled, else as created
        problem=(state or {}).get("problem") or None,
    )


def delete(home: Path, name: str) -> None:
    """Stop what runs of the experiment and remove its folder, whatever state its files are in."""
    path = existing_dir(home, name)
    try:
        local.stop_experiment(path)
    except CorruptFile:
        pass  # state.json cannot say which processes are its: stop_strays finds them all the same
    stop_strays(path)
    remove_dir(path)

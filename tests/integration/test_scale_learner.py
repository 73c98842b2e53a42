"""`surreal scale` reaching a running learner: the launcher writes scale.json into the experiment
directory, and the learner (an ES master here, over real gRPC on 127.0.0.1) takes the new count
without a restart: its server accepts the new workers' streams, the master hands out for the new
count, and status reports it. A worker stopped with SIGTERM (how a scale-down stops it) closes its
stream, so the learner's connected count drops at once."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import surreal.runtime.serving as serving
from surreal.protocol import LearnerClient, ProtocolError
from surreal.protocol.options import SERVER_KEEPALIVE_SECONDS
from surreal.runtime.es.actor import ESWorker, run_actor
from surreal.runtime.es.learner import run_learner
from surreal.runtime.es.presets import preset_for
from surreal.runtime.run import RunContext
from surreal.runtime.scale import SCALE_FILE

pytestmark = pytest.mark.slow

TOKEN = "t0k"
CFG = dataclasses.replace(preset_for("CartPole-v1"), eval_episodes=2, checkpoint_every=1000,
                          final_eval_timeout=5.0, flush_interval=0.05)  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return value


def run_in_thread(target: Callable[..., int], *args: Any) -> tuple[threading.Thread, dict]:
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("rc", target(*args)), daemon=True)
    thread.start()
    return thread, result


def gate(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """A gate on every in-process worker's env step: while it is clear they take none, so the run
    cannot advance, however fast the machine (the workers are threads of this process: SIGSTOP
    cannot hold them). Open when returned."""
    opened, step = threading.Event(), ESWorker.step

    def gated(self: ESWorker) -> None:
        opened.wait()
        step(self)

    monkeypatch.setattr(ESWorker, "step", gated)
    opened.set()
    return opened


def write_scale(exp_dir: Path, agents: int) -> None:
    """What the launcher does: a temporary file in the same folder, then os.replace."""
    tmp = exp_dir / f".{SCALE_FILE}.tmp"
    tmp.write_text(json.dumps({"agents": agents}))
    os.replace(tmp, exp_dir / SCALE_FILE)


def status_of(client: LearnerClient) -> dict[str, Any]:
    try:
        return client.status(timeout=2.0)
    except ProtocolError:
        return {}


def context(tmp_path: Path, addr: str, total: int, index: int = 0) -> RunContext:
    return RunContext(env_id="CartPole-v1", seed=0, total_steps=total, num_agents=2, exp_dir=tmp_path,
                      learner_addr=addr, token=TOKEN, index=index, has_evaluator=False)  # fmt: skip


def test_a_running_es_master_scales_from_2_to_6_agents(tmp_path: Path, monkeypatch) -> None:
    # No spare streams: the server takes exactly one stream per agent, so without the scale the
    # four new workers would be refused (too_many_streams), not quietly let in.
    monkeypatch.setattr(serving, "SPARE_STREAMS", 0)
    # The workers are held from the first update until all six are connected: the run cannot end
    # before the new ones join. Then they go on together; the six report within an episode each,
    # against a run of 1M steps (200k took 5.5 s here).
    opened = gate(monkeypatch)
    addr, total = f"127.0.0.1:{free_port()}", 1_000_000
    roles = [run_in_thread(run_learner, CFG, context(tmp_path, addr, total))]
    roles += [run_in_thread(run_actor, CFG, context(tmp_path, addr, total, i)) for i in range(2)]
    client = LearnerClient(addr, TOKEN)
    try:
        before = wait_for(lambda: (s := status_of(client)).get("updates", 0) >= 1
                          and s["connected_actors"] == 2 and s, 60, "two workers training")  # fmt: skip
        opened.clear()
        assert before["agents"] == 2 and before["pairs_per_agent"] == 12  # ceil(1.5 * 16 / 2)
        write_scale(tmp_path, 6)
        wait_for(lambda: status_of(client).get("agents") == 6, 10, "the learner to take 6 agents")
        roles += [run_in_thread(run_actor, CFG, context(tmp_path, addr, total, i)) for i in range(2, 6)]
        held = wait_for(lambda: (s := status_of(client)).get("connected_actors") == 6 and s, 60,
                        "six workers connected")  # fmt: skip
        assert not held["done"] and held["env_steps"] < total // 2, held
        opened.set()
        during = wait_for(lambda: (s := status_of(client)).get("connected_actors") == 6
                          and s["agents_reporting"] == 6 and s, 60, "six workers' results")  # fmt: skip
        assert not during["done"], "the run ended before the new workers joined: raise `total`"
        assert during["wire_rejections"]["too_many_streams"] == 0, during
        assert during["pairs_per_agent"] == 4 and during["agents"] == 6  # ceil(1.5 * 16 / 6)
        for thread, _ in roles:
            thread.join(timeout=300)
        assert [r.get("rc") for _, r in roles] == [0] * 7
    finally:
        client.close()
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["done"] and status["env_steps"] >= total and status["agents"] == 6, status
    assert status["wire_rejections"]["too_many_streams"] == 0, status


# The worker as `surreal component` runs it: its SIGTERM handler (preemption.on_sigterm, as
# surreal/component.py installs it) says a stop was asked for, then exits 143; a bare sys.exit(143)
# landing inside the environment's step would read as the environment's own SystemExit (exit 1).
WORKER = """
import signal, sys
from surreal.runtime import preemption
signal.signal(signal.SIGTERM, preemption.on_sigterm)
from surreal.runtime.run import RunContext
from surreal.runtime.es.actor import ESWorker, run_actor
from surreal.runtime.es.config import ESConfig
import json, pathlib
ctx, cfg = json.loads(sys.argv[1]), json.loads(sys.argv[2])
ctx["exp_dir"] = pathlib.Path(ctx["exp_dir"])
cfg["hidden_sizes"] = tuple(cfg["hidden_sizes"])
sys.exit(run_actor(ESConfig(**cfg), RunContext(**ctx)))
"""


# How soon the learner must see a SIGTERMed worker's stream closed. Without the close, the server
# finds a vanished worker's stream only by its keepalive (SERVER_KEEPALIVE_SECONDS, then
# KEEPALIVE_TIMEOUT_SECONDS: 30 s), so a bar below SERVER_KEEPALIVE_SECONDS still tells the close
# from the keepalive. The drop is usually about a second; under `make test` (two xdist workers on 2
# cores, this test's learner and actor threads in the pytest process beside the worker, a container
# test on the other worker) one CI run took over 5 s, the bar this test had then.
STREAM_CLOSED_BAR = SERVER_KEEPALIVE_SECONDS - 5.0


def test_a_worker_stopped_with_sigterm_closes_its_stream_at_once(tmp_path: Path, monkeypatch) -> None:
    """The run is held while the worker is stopped (the in-process worker gated, the worker process
    SIGSTOPped, its SIGTERM delivered when it goes on): a finished run's worker exits 0, not 143."""
    opened = gate(monkeypatch)
    addr, total = f"127.0.0.1:{free_port()}", 200_000
    roles = [run_in_thread(run_learner, CFG, context(tmp_path, addr, total)),
             run_in_thread(run_actor, CFG, context(tmp_path, addr, total, 0))]  # fmt: skip
    ctx = {**dataclasses.asdict(context(tmp_path, addr, total, 1)), "exp_dir": str(tmp_path)}
    log = (tmp_path / "worker.log").open("wb")
    argv = [sys.executable, "-c", WORKER, json.dumps(ctx), json.dumps(dataclasses.asdict(CFG))]
    env = {**os.environ, "PYTHONPATH": ""}
    worker = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    client = LearnerClient(addr, TOKEN)
    try:
        wait_for(lambda: (s := status_of(client)).get("connected_actors") == 2
                 and s["agents_reporting"] == 2, 120, "both workers' results")  # fmt: skip
        opened.clear()
        worker.send_signal(signal.SIGSTOP)
        held = status_of(client)
        assert not held.get("done") and held.get("env_steps", 0) < total, held
        write_scale(tmp_path, 1)  # the launcher's scale-down: the file, then the worker stopped
        worker.send_signal(signal.SIGTERM)
        worker.send_signal(signal.SIGCONT)
        stopped = time.monotonic()
        # The worker closes its stream on the way out: the server's count drops (status is
        # rewritten each second), and the process exits with SIGTERM's code. STREAM_CLOSED_BAR's
        # comment says why its bar is what it is.
        wait_for(lambda: (s := status_of(client)).get("connected_actors") == 1 and s["agents"] == 1,
                 STREAM_CLOSED_BAR, "the learner to see the stream closed")  # fmt: skip
        dropped = time.monotonic() - stopped
        opened.set()
        assert worker.wait(timeout=30) == 143
        print(f"SIGTERM: stream count dropped after {dropped:.1f} s, "
              f"the process exited after {time.monotonic() - stopped:.1f} s")  # fmt: skip
        for thread, _ in roles:
            thread.join(timeout=300)
        assert [r.get("rc") for _, r in roles] == [0, 0]
    finally:
        client.close()
        if worker.poll() is None:
            worker.kill()
        log.close()
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["done"] and status["env_steps"] >= total and status["agents"] == 1, status

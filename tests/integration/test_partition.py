"""Network faults between two hosts (network namespaces on this machine, netns_hosts.py): the
learner and evaluator on one, an actor worker on the other, started with the one entry point every
backend uses (`surreal component ROLE --spec FILE`) and the variables a launcher sets.

- The link is cut for 30 s at the learner's end: the actor's packets vanish without an error (the
  case keepalives exist for). The actor notices, reconnects once the link is back, and the run ends.
- The learner's host becomes unreachable and the learner dies with it; a new learner comes back at
  the same address from its checkpoint. The actor finds it again, and the run ends.

Bounded by env steps and explicit timeouts. Needs root (or CAP_NET_ADMIN) and iproute2.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from cli_harness import wait_for
from netns_hosts import Hosts, available

from surreal.runtime.checkpoint import load_checkpoint
from surreal.spec import build_spec

pytestmark = [pytest.mark.slow, pytest.mark.skipif(available() is not None, reason=str(available()))]

# The actor is frozen (SIGSTOP) from the progress a test needs until its fault is in place, so the
# run cannot end first: STEPS is beyond what a fast machine runs in the second the learner's status
# may lag (40k was not: beside the full suite on 2 cores, a 30k run's first status with steps showed
# 9.3k, at 7-11k steps/s). The runs' steps changed with it (40k to 100k).
STEPS = 100_000
PORT = 7100
SURREAL = (sys.executable, "-m", "surreal", "component")


class Run:
    """A CartPole PPO experiment spread over the two hosts (2 epochs per update, not 20: the test
    is about the network, and the learner is the run's bottleneck)."""

    def __init__(self, hosts: Hosts, work: Path) -> None:
        self.hosts, self.work = hosts, work
        spec = build_spec("partition", flags={"algo": "ppo", "env": "CartPole-v1", "agents": 2,
                                              "steps": STEPS, "seed": 1},
                          overrides={"eval_episodes": "2", "checkpoint_every": "10",
                                     "epochs": "2"})  # fmt: skip
        self.spec_file = work / "spec.yaml"
        self.spec_file.write_text(spec.to_yaml())
        self.env = {
            **os.environ, "PYTHONUNBUFFERED": "1", "SURREAL_TOKEN": "partition-token",
            "SURREAL_LEARNER_ADDR": f"{hosts.addr['learner']}:{PORT}", "SURREAL_EXP_DIR": str(work),
        }  # fmt: skip
        self.procs = {
            "learner": self.start_learner(),
            "evaluator": self.start("learner", "evaluator", {}),
            "actor": self.start("actor", "actor", {"SURREAL_AGENTS_IN_WORKER": "2"}),
        }

    def start(self, host: str, role: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
        argv = [*SURREAL, role, "--spec", str(self.spec_file)]
        return self.hosts.start(host, argv, {**self.env, **env}, self.work / f"{role}.log")

    def start_learner(self) -> subprocess.Popen[bytes]:
        return self.start("learner", "learner", {"SURREAL_BIND_HOST": self.hosts.addr["learner"]})

    def status(self) -> dict[str, Any]:
        try:
            return json.loads((self.work / "status.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def steps(self) -> int:
        return self.status().get("env_steps") or 0

    def finish(self, timeout: float = 300.0) -> dict[str, Any]:
        """Wait for every component to exit; their exit codes must be 0."""
        deadline = time.monotonic() + timeout
        codes = {}
        for role, proc in self.procs.items():
            codes[role] = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        assert codes == {"learner": 0, "evaluator": 0, "actor": 0}, (codes, self.logs())
        return self.status()

    def log(self, role: str) -> str:
        return (self.work / f"{role}.log").read_text(errors="replace")

    def logs(self) -> str:
        return "\n".join(f"--- {r}\n{self.log(r)[-3000:]}" for r in ("learner", "actor", "evaluator"))


@contextlib.contextmanager
def held(run: Run) -> Iterator[dict[str, Any]]:
    """The actor worker (and any child of it) stopped for the block, then continued: the run takes
    no env step meanwhile. Yields a status the learner wrote after the stop, which the test checks
    is short of STEPS."""
    top = psutil.Process(run.procs["actor"].pid)
    procs = [top, *top.children(recursive=True)]
    for proc in procs:
        proc.suspend()
    try:
        stopped_at = time.time()
        wait_for(lambda: (run.work / "status.json").stat().st_mtime > stopped_at + 0.5, 30,
                 "a status written after the actor's stop")  # fmt: skip
        status = run.status()
        assert status["env_steps"] < STEPS and not status.get("done"), status
        yield status
    finally:
        for proc in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.resume()


@pytest.fixture
def hosts():
    with Hosts() as h:
        yield h


def test_an_actor_cut_off_for_30s_reconnects_and_the_run_finishes(hosts: Hosts, tmp_path: Path) -> None:
    run = Run(hosts, tmp_path)
    wait_for(lambda: run.steps() >= 5_000, 120, "training to start", poll=0.05)
    with held(run):  # continued once the link is down: it finds it cut
        hosts.cut("learner")
    time.sleep(10)
    cut = run.steps()  # status.json lags by a second, and fragments were in flight: let them land
    time.sleep(20)
    during = run.steps()
    hosts.mend("learner")
    final = run.finish()
    actor_log = run.log("actor")
    print(f"steps 10 s into the cut {cut}, at the mend {during}, final {final['env_steps']}, "
          f"eval return {final['eval_return']}")  # fmt: skip
    assert during == cut  # nothing got through while the link was down
    assert final["done"] and final["env_steps"] >= STEPS
    assert "connection lost" in actor_log, run.logs()
    assert actor_log.count("connected to the learner") >= 2, run.logs()


def test_a_learner_back_at_the_same_address_is_found_again(hosts: Hosts, tmp_path: Path) -> None:
    run = Run(hosts, tmp_path)
    checkpoint = tmp_path / "checkpoints" / "latest.pt"
    wait_for(lambda: checkpoint.exists() and run.status().get("updates", 0) >= 12, 120, "a checkpoint",
             poll=0.05)  # fmt: skip
    # The learner's host drops off the network and its learner dies with it (the actor continued
    # once it is gone).
    with held(run):
        hosts.cut("learner")
        run.procs["learner"].send_signal(signal.SIGKILL)
        run.procs["learner"].wait(timeout=30)
    saved = load_checkpoint(checkpoint.parent)
    assert saved is not None
    checkpointed = int(saved["counters"]["updates"])  # what the next learner must start from
    time.sleep(15)  # the scenario: the learner's host stays away a while, its actors retrying
    hosts.mend("learner")
    run.procs["learner"] = run.start_learner()
    final = run.finish()
    print(f"checkpointed {checkpointed} updates; final {final['updates']} updates, "
          f"{final['env_steps']} steps, eval return {final['eval_return']}")  # fmt: skip
    assert final["done"] and final["env_steps"] >= STEPS
    # The next learner took the checkpoint's counters (not zero) and went on from them.
    resumed = [line for line in run.log("learner").splitlines() if "resumed from checkpoint" in line]
    assert len(resumed) == 1 and f"updates={checkpointed}," in resumed[0], run.logs()
    assert final["updates"] > checkpointed
    assert run.log("actor").count("connected to the learner") >= 2, run.logs()

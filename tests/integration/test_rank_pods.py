"""Learner ranks across pods (ranks.py), each pod a host of its own (a network namespace joined by
a veth pair, netns_hosts.py): pod 0's agent serves the control store on its address, pod 1's agent
reaches it across the link, and the ranks' all-reduces cross it too (gloo on the veth). The ranks
are rank_pods.py's (the group's update protocol without the learner), so the faults cost seconds:

- SIGKILL to pod 1's rank: both pods start their ranks again in the next generation, from rank 0's
  checkpoint; pod 0 counts no failure of its own (a peer pod left);
- SIGTERM to pod 1's agent (its pod preempted): its rank finishes the round and leaves, rank 0
  saves that same round, pod 1 exits 143; its replacement (a fresh agent, as a Job makes one)
  joins the next generation and both resume at the saved round: 0 rounds lost;
- SIGKILL to pod 0's agent (the pod with the checkpoint and the control store): its ranks die with
  it, pod 1's fail on the store; a replacement of pod 0 serves a new store, pod 1's agent finds it,
  and the group resumes from the checkpoint;
- and the run ends with both pods' agents exiting 0.

A pod that never comes fails the other's agent in bounded time, naming it.
Every wait is on a condition; the assertions are exact (rounds resumed), not bars. 10 runs of the
first test beside a containers test loop: all passed, 47-62 s each. Needs root (or CAP_NET_ADMIN)
and iproute2.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from cli_harness import wait_for
from netns_hosts import Hosts, available

from surreal.runtime.exits import EXIT_GROUP_NOT_FORMED, EXIT_PREEMPTED

pytestmark = [pytest.mark.slow, pytest.mark.skipif(available() is not None, reason=str(available()))]

SCRIPT = Path(__file__).with_name("rank_pods.py")
POD_HOST = {0: "learner", 1: "actor"}  # netns_hosts' two hosts


class Pods:
    def __init__(self, hosts: Hosts, out: Path, rounds: int) -> None:
        self.hosts, self.out, self.rounds = hosts, out, rounds
        self.control = f"{hosts.addr['learner']}:29400"
        path = [str(SCRIPT.parent), *filter(None, [os.environ.get("PYTHONPATH")])]
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}

    def start(self, pod: int, **flags: str) -> subprocess.Popen[bytes]:
        argv = [sys.executable, str(SCRIPT), "agent", "--pod", str(pod), "--pods", "2", "--learners", "2",
                "--control", self.control, "--out", str(self.out), "--rounds", str(self.rounds)]  # fmt: skip
        for flag, value in flags.items():
            argv += [f"--{flag.replace('_', '-')}", value]
        return self.hosts.start(POD_HOST[pod], argv, self.env, self.out / f"pod{pod}.log")

    def checkpoint(self) -> int:
        try:
            return int(json.loads((self.out / "checkpoint.json").read_text())["round"])
        except (OSError, ValueError):
            return -1

    def lines(self, rank: int, word: str) -> list[str]:
        path = self.out / f"rank-{rank}.log"
        return [ln for ln in path.read_text().splitlines() if ln.startswith(word)] if path.exists() else []

    def starts(self, rank: int) -> list[tuple[int, str]]:
        """(round, generation) of each start of `rank`."""
        return [(int(m[1]), m[2]) for ln in self.lines(rank, "start")
                if (m := re.fullmatch(r"start (\d+) gen (\S+)", ln))]  # fmt: skip

    def log(self, pod: int) -> str:
        return (self.out / f"pod{pod}.log").read_text()


def rank_process(agent: subprocess.Popen[bytes]) -> psutil.Process:
    [found] = [p for p in psutil.Process(agent.pid).children(recursive=True) if "rank" in p.cmdline()]
    return found


@pytest.fixture
def hosts() -> Hosts:
    with Hosts() as h:
        yield h


def test_ranks_across_two_pods_survive_a_killed_rank_a_preempted_pod_and_the_loss_of_pod_0(
    hosts: Hosts, tmp_path: Path
) -> None:
    pods = Pods(hosts, tmp_path, rounds=1000)  # at least 10 s of rounds: the faults come in the first
    pod0, pod1 = pods.start(0), pods.start(1)
    wait_for(lambda: pods.checkpoint() >= 20, 120.0, "20 rounds of the first group", poll=0.05)

    # SIGKILL to pod 1's rank: a new generation on both pods, from the checkpoint.
    victim = rank_process(pod1)
    victim.send_signal(signal.SIGSTOP)  # the group completes at most the round in flight now
    saved = pods.checkpoint()
    victim.kill()
    # Well before PEER_TIMEOUT_SECONDS (60): pod 1's agent says its rank is gone.
    wait_for(lambda: len(pods.starts(0)) == 2 and len(pods.starts(1)) == 2, 40.0, "the second group")
    (r0, g0), (r1, g1) = pods.starts(0)[1], pods.starts(1)[1]
    assert r0 == r1 and saved <= r0 <= saved + 1 and g0 == g1 == "1", (pods.starts(0), pods.starts(1), saved)

    # SIGTERM to pod 1's agent: a clean leave of its rank, a clean save of the same round by rank 0.
    wait_for(lambda: pods.checkpoint() >= saved + 20, 60.0, "20 rounds of the second group", poll=0.05)
    ends = len(pods.lines(0, "end"))  # rank 0 left the first group as a peer was lost: saved, then ended
    pod1.send_signal(signal.SIGTERM)
    assert pod1.wait(60) == EXIT_PREEMPTED
    ended1 = int(pods.lines(1, "end")[-1].split()[1])
    wait_for(lambda: len(pods.lines(0, "end")) == ends + 1, 30.0, "rank 0 to save and leave")
    assert int(pods.lines(0, "end")[-1].split()[1]) == ended1 == pods.checkpoint()
    assert pods.lines(0, "peer lost: learner rank 1 left (exit 143)"), pods.lines(0, "")
    pod1 = pods.start(1)  # the Job's replacement: a fresh agent
    wait_for(lambda: len(pods.starts(0)) == 3 and len(pods.starts(1)) == 3, 120.0, "the third group")
    assert pods.starts(0)[2][0] == pods.starts(1)[2][0] == ended1  # 0 rounds lost
    assert pods.starts(0)[2][1] == pods.starts(1)[2][1] == "2"

    # SIGKILL to pod 0's agent: its rank dies with it, the control store with it; a new pod 0.
    wait_for(lambda: pods.checkpoint() >= ended1 + 20, 60.0, "20 rounds of the third group", poll=0.05)
    pod0.kill()
    pod0.wait(30)
    at_loss = pods.checkpoint()
    pod0 = pods.start(0)
    wait_for(lambda: len(pods.starts(0)) == 4 and len(pods.starts(1)) == 4, 180.0, "the fourth group")
    assert pods.starts(0)[3][0] == pods.starts(1)[3][0] == at_loss  # rank 0's checkpoint, every round

    assert pod0.wait(180) == 0 and pod1.wait(60) == 0
    assert pods.checkpoint() == 1000 and pods.lines(0, "end")[-1] == pods.lines(1, "end")[-1] == "end 1000"
    # Pod 0's agent counted none of its group's ends against it (a peer left each time); pod 1's
    # agent counted its killed rank and then the loss of pod 0's store, which its rank failed on.
    assert "a rank failed" not in pods.log(0) and pods.log(0).count("a peer pod left") >= 1, pods.log(0)
    assert "learner pods' control store" in pods.log(1) or "a rank failed" in pods.log(1), pods.log(1)


def test_a_pod_that_never_comes_fails_the_other_naming_it(hosts: Hosts, tmp_path: Path) -> None:
    pods = Pods(hosts, tmp_path, rounds=10)
    pod0 = pods.start(0, pod_join="3")
    assert pod0.wait(60) == EXIT_GROUP_NOT_FORMED
    assert "learner pod 1 of 2 did not come within 3 s" in pods.log(0), pods.log(0)
    assert not pods.starts(0)  # no rank was started

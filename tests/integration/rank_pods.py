"""Learner ranks across pods without the learner: what ranks.py does for the PPO learner, run by a
test on hosts of its own (network namespaces, netns_hosts.py). Nothing in the product reads it.

    python rank_pods.py agent --pod P --pods N --learners L --control HOST:PORT --out DIR --rounds R
        a learner pod's agent: agent.launch_ranks(L, pods=...) running this file's `rank`
    python rank_pods.py rank --out DIR --rounds R --learners L
        one rank: rounds of the group's update protocol (commit, wait for all, an all-reduce), each
        ended by rank 0's "checkpoint" (DIR/checkpoint.json, the last round completed); it starts
        from that checkpoint (rank 0 broadcasts it), as a learner resumes. SIGTERM: the round in
        flight is finished, rank 0 saves it, the rank leaves and exits 143. A peer lost between
        rounds (PeerLost): saved and left the same way.

Each rank appends `start ROUND gen GENERATION` and `end ROUND` lines to DIR/rank-R.log.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

import torch

from surreal.orchestrator import rank_agent as agent
from surreal.runtime import ranks
from surreal.runtime.exits import EXIT_COLLECTIVE_FAILED, EXIT_PREEMPTED


def run_agent(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format=f"pod {args.pod} %(levelname)s %(message)s")
    pods = ranks.Pods(args.pod, args.pods, args.control)
    argv = (__file__, "rank", "--out", str(args.out), "--rounds", str(args.rounds), "--learners",
            str(args.learners), "--pace", str(args.pace))  # fmt: skip
    join = datetime.timedelta(seconds=args.join)
    try:
        return agent.launch_ranks(args.learners, join, pods=pods, argv=argv,
                                  pod_join_timeout=datetime.timedelta(seconds=args.pod_join))  # fmt: skip
    except ranks.GroupNotFormed as exc:  # as the learner component reports a RoleFailed
        logging.error("%s", exc)
        return exc.code


def rank(args: argparse.Namespace) -> int:
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    group = ranks.group_from_environ(args.learners, datetime.timedelta(seconds=30))
    out: Path = args.out
    checkpoint = out / "checkpoint.json"
    start = json.loads(checkpoint.read_text())["round"] if group.is_root and checkpoint.exists() else 0
    done = int(group.broadcast(start))
    log = (out / f"rank-{group.rank}.log").open("a")
    log.write(f"start {done} gen {os.environ.get(ranks.ENV_GENERATION, '-')}\n")
    log.flush()

    def save_and_leave(code: int) -> int:
        if group.is_root:
            tmp = checkpoint.with_suffix(".tmp")
            tmp.write_text(json.dumps({"round": done}))
            os.replace(tmp, checkpoint)
        log.write(f"end {done}\n")
        log.close()
        group.leave(code)
        return code

    try:
        while done < args.rounds:
            if stop:
                return save_and_leave(EXIT_PREEMPTED)
            group.commit(done)
            while not group.all_committed(done):
                group.keep_alive()
                time.sleep(0.005)
            total = group.sum(torch.ones(1))
            assert int(total.item()) == group.size, total
            done += 1
            if group.is_root:
                tmp = checkpoint.with_suffix(".tmp")
                tmp.write_text(json.dumps({"round": done}))
                os.replace(tmp, checkpoint)
            time.sleep(args.pace)
    except ranks.PeerLost as exc:
        log.write(f"peer lost: {exc}\n")
        return save_and_leave(EXIT_PREEMPTED)
    except ranks.CollectiveFailed as exc:  # a peer gone mid-round: no save, as the learner's rank
        log.write(f"collective failed: {exc}\n")
        log.close()
        return EXIT_COLLECTIVE_FAILED
    log.write(f"end {done}\n")
    log.close()
    group.close()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=("agent", "rank"))
    parser.add_argument("--pod", type=int, default=0)
    parser.add_argument("--pods", type=int, default=1)
    parser.add_argument("--learners", type=int, required=True)
    parser.add_argument("--control", default="")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, required=True)
    parser.add_argument("--join", type=float, default=30.0)
    parser.add_argument("--pod-join", type=float, default=60.0)
    parser.add_argument("--pace", type=float, default=0.01, help="seconds between rounds, at least")
    args = parser.parse_args()
    return run_agent(args) if args.what == "agent" else rank(args)


if __name__ == "__main__":
    sys.exit(main())

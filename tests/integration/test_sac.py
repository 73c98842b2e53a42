"""SAC from replay shards, end to end through the installed `surreal`: it learns Pendulum with the
replay ratio held, and a run survives one shard SIGKILLed and another SIGTERMed (its rows saved and
restored, the other's loss counted). Bounded by env steps; every wait has a timeout."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
from cli_harness import RUN_TIMEOUT, Cli, ended, frozen, running, status_after, wait_for

pytestmark = pytest.mark.slow

# Small networks and half SB3's replay ratio: the learner's updates are the run's cost, and these
# learn Pendulum in 15k steps (the preset's 256x256 at ratio 256 takes 20k: docs/algorithms/sac.md).
STEPS = 15_000
LEARN = ("--algo", "sac", "--env", "Pendulum-v1", "--steps", str(STEPS), "--set", "hidden_sizes=[64,64]",
         "--set", "replay_ratio=128")  # fmt: skip
RATIO, LEARNING_STARTS = 128.0, 100


def test_sac_learns_pendulum_with_its_replay_ratio_held(cli: Cli) -> None:
    """Eval return of the final policy at 15k steps, 10 runs of seed 0 two at a time beside a CPU hog
    and the container suite's repeat (load 8-10): min -153.1, median -147.8. Once since, beside the
    slow suite's other worker, a type check and a test module of its own (load above 10), it gave
    -431.9; 6 runs after it, 2 of them beside the fast suite's two workers: -148 to -142. Bar -600
    (random actions score about -1,200). At 10k steps, its old length, the same load gave min -474.3,
    median -214.5 (2 of 10 under the bar; quiet, seeds 0-9 two at a time had given min -239.4):
    the runs are asynchronous, a seed does not fix them, and at 10k Pendulum is still being
    learned. The rows trained per row inserted past the warm-up are within 10 % of replay_ratio
    (the limiter's band is two batches: 0.3 % here). The issue's own command, `surreal create sac1
    --algo sac --env Pendulum-v1 --steps 20000 --seed S` (the preset, 256x256, ratio 256: about
    5 minutes a run, so not here), seeds 0-9 one at a time: min -160.1, median -148.8 (its bar
    -250; docs/algorithms/sac.md)."""
    cli.run("create", "sac", *LEARN, "--seed", "0", timeout=RUN_TIMEOUT)
    st = cli.status("sac")
    assert st["phase"] == "Succeeded" and st["env_steps"] >= STEPS
    assert st["eval_return"] >= -600.0, st["eval_return"]
    replay = st["replay"]
    assert (
        replay["size"] >= STEPS - 100
        and replay["inserts_per_second"] > 0
        and replay["samples_per_second"] > 0
        and 0 < st["update_share"] <= 1
    )
    (shard,) = replay["shards"]
    held = shard["sampled"] / (shard["inserted"] - LEARNING_STARTS)
    assert abs(held / RATIO - 1) < 0.10, (held, shard)
    assert st["rows_trained"] <= shard["sampled"] and replay["lost"] == 0


def noted_rows(note: Path) -> int:
    """The rows a shard's note says it held (0 before its first note)."""
    try:
        return int(json.loads(note.read_text())["size"])
    except (FileNotFoundError, json.JSONDecodeError):
        return 0


def test_shards_and_the_learner_killed_or_preempted_and_the_run_succeeds(cli: Cli) -> None:
    """Two shards, four agents: SIGKILL to replay-0 (its rows are lost: status counts them), SIGTERM to
    replay-1 (it saves; its replacement restores exactly what was saved), then SIGKILL to the learner
    (it resumes from its checkpoint, the shards' rows untouched); the run goes on to Succeeded.

    The run is held open while the faults are injected, whatever the machine's speed: its actors
    are frozen (SIGSTOP) from the moment it has steps and updates until every replacement is up,
    so it cannot reach its steps meanwhile (CI lost this race on a faster machine: the run was done
    4 s after the shards started, and a done shard has nothing to save). The learner's updates
    pace the actors (4 env steps an update at this ratio), and the status read may be a second
    old: its steps are far beyond what a fast machine reaches in the second before the freeze,
    which the status written after the freeze shows."""
    steps = 30_000
    cli.run("create", "shards", "--algo", "sac", "--env", "Pendulum-v1", "--agents", "4",
            "--replay-shards", "2", "--steps", str(steps), "--seed", "1", "--set", "hidden_sizes=[32,32]",
            "--set", "replay_ratio=64", "--set", "eval_episodes=2", "--detach", timeout=30.0)  # fmt: skip

    def both_shards_hold_rows() -> dict | None:
        """The learner's status once it has updated and both shards hold rows (each actor inserts
        into one shard: on a busy machine one shard's actors may start seconds after the other's)."""
        st = running(cli, "shards", min_updates=1)
        shards = (st or {}).get("replay", {}).get("shards", [])
        return st if len(shards) == 2 and all(s.get("size", 0) > 0 for s in shards) else None

    first = wait_for(both_shards_hold_rows, 120.0, "updates, and rows in both shards")
    with frozen(cli, "shards") as actors:
        seen = status_after(cli, "shards", time.time())
        assert actors and seen["env_steps"] < steps // 2 and not seen.get("done"), (first, seen)
        # The rows a SIGKILL loses are counted from the shard's last note of its counters (every 2
        # s): kill it once a note holds rows (seen in CI: killed 3 s after its start, before its first).
        note = cli.exp_dir("shards") / "replay" / "shard-0.json"
        wait_for(lambda: noted_rows(note) > 0, 60.0, "replay-0's note of its rows")
        killed, preempted = cli.component("shards", "replay-0"), cli.component("shards", "replay-1")
        os.kill(killed["pid"], signal.SIGKILL)
        os.kill(preempted["pid"], signal.SIGTERM)
        wait_for(lambda: all(cli.component("shards", c)["restarts"] == 1 for c in ("replay-0", "replay-1")),
                 60.0, "both shards replaced")  # fmt: skip
        learner = cli.component("shards", "learner")
        os.kill(learner["pid"], signal.SIGKILL)
        wait_for(lambda: cli.component("shards", "learner")["restarts"] == 1, 60.0, "the learner replaced")
    final = wait_for(lambda: ended(cli, "shards"), RUN_TIMEOUT, "the run to end", poll=0.5)
    assert final["phase"] == "Succeeded", final
    assert {c["name"]: c["restarts"] for c in final["components"] if c["restarts"]} == {
        "replay-0": 1, "replay-1": 1, "learner": 1}, final["components"]  # fmt: skip
    learner_log = (cli.exp_dir("shards") / "logs" / "learner.log").read_text()
    assert "resumed from checkpoint" in learner_log
    log = (cli.exp_dir("shards") / "logs" / "replay-1.log").read_text()
    saved = [int(n) for n in re.findall(r"replay shard 1: saved (\d+) rows", log)]
    restored = [int(n) for n in re.findall(r"replay shard 1: restored (\d+) rows", log)]
    assert saved and restored[1] == saved[0] > 0, (saved, restored)
    shards = final["replay"]["shards"]
    assert shards[0]["lost"] > 0 and shards[1]["lost"] == 0 and final["replay"]["lost"] == shards[0]["lost"]
    cli.run("delete", "shards")

"""Preemption on the local backend, through the installed `surreal`: a learner sent SIGTERM saves
the version it has and resumes at exactly that version; one that is SIGKILLed loses at most
`checkpoint_seconds` of work. Runs are bounded by env steps, waits by explicit timeouts.
"""

from __future__ import annotations

import os
import re
import signal
import time

import pytest
import torch
from cli_harness import RUN_TIMEOUT, Cli, ended, frozen, running, status_after, wait_for
from test_fault_tolerance import dead

pytestmark = pytest.mark.slow

# Beyond what a fast machine takes in the second the learner's status may lag when a test acts on
# it (40k was not: beside the full suite on 2 cores a 30k run's first status with steps showed 9.3k,
# at 7-11k steps/s; a machine 4x faster can end a 40k run within that second).
STEPS = 100_000
QUICK = ("--algo", "ppo", "--env", "CartPole-v1", "--agents", "2", "--seed", "1",
         "--steps", str(STEPS), "--set", "eval_episodes=2",
         "--set", "epochs=2")  # fmt: skip
SAVED = re.compile(r"checkpoint: version (\d+), (\d+) env steps, (\d+) updates.*\(clean\)")
# What a learner logs when it restores (Learner._restore): how, and the counters it resumes with.
RESUMED = re.compile(
    r"resumed from checkpoint \((clean|jumped)\): Counters\(version=(\d+), env_steps=(\d+), updates=(\d+)"
)


def resumed(cli: Cli, name: str, nth: int = 1) -> tuple[str, int, int, int]:
    """The `nth` restart's resume line (the learner's log holds every process's lines; of learner
    ranks, rank 0's: every rank logs the same)."""

    def lines() -> list[tuple[str, ...]]:
        log = (cli.exp_dir(name) / "logs" / "learner.log").read_text()  # what `surreal logs` prints
        return RESUMED.findall(rank_0(log))

    found = wait_for(lambda: len(got := lines()) >= nth and got, 90.0,
                     f"restart {nth} of the learner to restore its checkpoint", poll=0.2)  # fmt: skip
    how, version, env_steps, updates = found[nth - 1]
    return how, int(version), int(env_steps), int(updates)


def rank_0(log: str) -> str:
    """The lines of a single learner, or of rank 0 of learner ranks (every rank logs the same)."""
    return "\n".join(line for line in log.splitlines() if " rank " not in line or " rank 0 " in line)


def clean_saves_before(log: str, nth: int) -> list[list[int]]:
    """(version, env steps, updates) of each clean checkpoint the learner's log shows before its
    `nth` resume: the run's own clean save at its end may follow."""
    ours, at = rank_0(log), -1
    for _ in range(nth):
        at = ours.index("resumed from checkpoint", at + 1)
    return [[int(x) for x in found] for found in SAVED.findall(ours[:at])]


def sigterm_and_resume(cli: Cli, name: str, *flags: str) -> tuple[dict, str, list[int], tuple]:
    """Create `name` (QUICK and `flags`) with no count-based or timed checkpoint, so that what the
    restart finds is the one the SIGTERM wrote; SIGTERM its learner after 5 updates. (the learner
    that was stopped, its log, what it saved: version, env steps, updates, and the restart's
    resume line: how, version, env steps, updates)."""
    cli.run("create", name, *QUICK, *flags, "--set", "checkpoint_every=100000",
            "--set", "checkpoint_seconds=100000", "--detach", timeout=30.0)  # fmt: skip
    wait_for(lambda: running(cli, name, min_updates=5), 120.0, "5 updates", poll=0.05)
    victim = cli.component(name, "learner")
    # The actors frozen until the restart has resumed: the run cannot end before the SIGTERM.
    with frozen(cli, name):
        held = status_after(cli, name, time.time())
        assert held["env_steps"] < STEPS and not held.get("done"), held
        os.kill(victim["pid"], signal.SIGTERM)
        wait_for(lambda: dead(victim["pid"]), 60.0, "the learner to exit", poll=0.01)
        resume = resumed(cli, name)
    log = cli.run("logs", name, "learner", "--lines", "100000").stdout
    saves = clean_saves_before(log, 1)
    assert len(saves) == 1, f"expected the SIGTERM's clean checkpoint only:\n{log}"
    saved = saves[0]
    print(f"SIGTERM saved version {saved[0]}, {saved[1]} env steps, {saved[2]} updates; resumed {resume}")
    return victim, log, saved, resume


def test_sigterm_to_the_learner_loses_no_update(cli: Cli) -> None:
    victim, log, (version, env_steps, updates), (how, *counters) = sigterm_and_resume(cli, "pre-term")
    assert "exit code 143" in log and "a disruption, not a failure" in log, log
    assert updates >= 5
    # The restart resumes exactly what the stopped learner had: same version, steps and updates.
    assert (how, *counters) == ("clean", version, env_steps, updates), (how, counters)

    # A new learner: it resumed (above), and a short run may already have ended by now (one CI
    # run's had), so it is Running or Succeeded.
    wait_for(lambda: (c := cli.component("pre-term", "learner"))["restarts"] == 1
             and c["pid"] != victim["pid"] and c["state"] in ("Running", "Succeeded"),
             60.0, "a new learner")  # fmt: skip
    final = wait_for(lambda: ended(cli, "pre-term"), RUN_TIMEOUT, "the end", poll=0.5)
    assert final["phase"] == "Succeeded", final
    assert final["env_steps"] >= STEPS and final["updates"] > updates
    learner = next(c for c in cli.state("pre-term")["components"] if c["name"] == "learner")
    assert (learner["restarts"], learner["failures"]) == (1, 0), learner
    cli.run("delete", "pre-term")


def test_sigkill_loses_at_most_checkpoint_seconds(cli: Cli) -> None:
    """The bar (checkpoint_seconds + 5 s) against the measured lag from the last timed checkpoint
    to the kill: 10 runs on the 2-core machine, min 0.05 s, median 0.30 s, max 0.45 s
    (`make repeat TESTS=tests/integration/test_preemption.py`; each run prints its lag). Those
    runs had 40k steps; STEPS is 100k now (a fast machine could end 40k before the learner is
    stopped), so the spread needs re-measuring. The stopped learner holds the run: it hands out
    no credit, and a learner that had ended would have saved cleanly (asserted not)."""
    seconds = 2.0
    cli.run("create", "pre-kill", *QUICK, "--set", "checkpoint_every=100000",
            "--set", f"checkpoint_seconds={seconds}", "--detach", timeout=30.0)  # fmt: skip
    checkpoint = cli.exp_dir("pre-kill") / "checkpoints" / "latest.pt"
    wait_for(lambda: running(cli, "pre-kill", min_updates=5) and checkpoint.exists(), 90.0,
             "5 updates and a timed checkpoint", poll=0.05)  # fmt: skip
    victim = cli.component("pre-kill", "learner")
    # Frozen, the learner writes nothing more: the checkpoint read now is the one a kill leaves.
    os.kill(victim["pid"], signal.SIGSTOP)
    killed_at = time.time()
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    os.kill(victim["pid"], signal.SIGKILL)
    wait_for(lambda: dead(victim["pid"]), 60.0, "the learner to die", poll=0.01)

    # Lost: the work since the last timed checkpoint: at most checkpoint_seconds, plus the update
    # in flight when it came due (CartPole's take milliseconds; 5 s of margin for a busy machine).
    assert not saved["clean"]
    lag = killed_at - saved["saved_at"]
    print(f"SIGKILL {lag:.2f} s after the last timed checkpoint (every {seconds} s)")
    assert lag <= seconds + 5.0, lag
    how, _, env_steps, updates = resumed(cli, "pre-kill")
    counters = saved["counters"]
    assert (how, env_steps, updates) == ("jumped", counters["env_steps"], counters["updates"])
    final = wait_for(lambda: ended(cli, "pre-kill"), RUN_TIMEOUT, "the end", poll=0.5)
    assert final["phase"] == "Succeeded", final
    learner = next(c for c in cli.state("pre-kill")["components"] if c["name"] == "learner")
    assert (learner["restarts"], learner["failures"]) == (1, 1), learner  # a crash, unlike SIGTERM
    cli.run("delete", "pre-kill")

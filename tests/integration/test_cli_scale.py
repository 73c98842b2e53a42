"""`surreal scale` on a running local experiment, through the installed command: the learner is
not restarted, takes every new stream, reports the new count, and the run ends Succeeded."""

from __future__ import annotations

import subprocess
import time

import pytest
from cli_harness import RUN_TIMEOUT, Cli, ended, frozen, running, status_after, wait_for

pytestmark = pytest.mark.slow
STEPS = 150_000


def connected(cli: Cli, name: str, actor: str) -> int:
    """How many times `actor` (every process of that name, one log) has connected to the learner."""
    log = cli.exp_dir(name) / "logs" / f"{actor}.log"
    return log.read_text().count("connected to the learner") if log.exists() else 0


def scaled(cli: Cli, name: str, agents: int) -> str:
    """`surreal scale NAME --agents AGENTS` with the run's actors frozen, continued once the
    supervisor has retired any of them (a changed command restarts an actor: on 2 cores each actor
    process hosts several agents), so that they take its SIGTERM and stop cleanly, or once the
    scale is done. Its output."""
    with frozen(cli, name) as pids:
        argv = cli.argv("scale", name, "--agents", str(agents))
        scale = subprocess.Popen(argv, env=cli.env, text=True, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)  # fmt: skip
        try:
            wait_for(lambda: scale.poll() is not None
                     or not set(pids) <= {c["pid"] for c in cli.state(name)["components"]},
                     150.0, f"the scale to {agents} to retire an actor, or to end")  # fmt: skip
        except BaseException:
            scale.kill()
            raise
    try:
        out, err = scale.communicate(timeout=150.0)
    finally:
        scale.kill()
    assert scale.returncode == 0, err
    return out


def test_scale_up_then_down_reaches_the_learner_and_the_run_succeeds(cli: Cli) -> None:
    # The run is held open while it is scaled, whatever the machine's speed: its actors are frozen
    # (SIGSTOP) from its first env steps to the scale up, and again, once every actor the scale up
    # started has connected to the learner, to the scale down (an actor a scale retires is
    # continued then, to take its SIGTERM). Unheld, the second scale came at 27-31k steps in 3
    # runs, and at 135k of 150k in one run beside the full suite: a bet a faster machine loses.
    # Where the second scale comes now (printed, from a status written while the run was held)
    # needs re-measuring. Down to 2 agents, not 1: the rest of the run goes twice as fast.
    cli.run("create", "s1", "--algo", "ppo", "--env", "CartPole-v1", "--agents", "2", "--steps", str(STEPS),
            "--seed", "1", "--detach", timeout=30.0)  # fmt: skip
    wait_for(lambda: running(cli, "s1"), 60.0, "phase Running with env steps", poll=0.05)
    learner = cli.component("s1", "learner")
    before = {c["name"]: (c["pid"], connected(cli, "s1", c["name"])) for c in cli.state("s1")["components"]
              if c["role"] == "actor"}  # fmt: skip

    out = scaled(cli, "s1", 6)
    assert "6 agents" in out, out

    def new_ones_connected() -> bool:
        actors = [c for c in cli.state("s1")["components"] if c["role"] == "actor"]
        fresh = [c for c in actors if c["pid"] != before.get(c["name"], (None, 0))[0]]
        return bool(fresh) and all(connected(cli, "s1", c["name"]) > before.get(c["name"], (0, 0))[1]
                                   for c in fresh)  # fmt: skip

    wait_for(new_ones_connected, 120.0, "every actor the scale started to connect", poll=0.05)
    with frozen(cli, "s1"):
        held = status_after(cli, "s1", time.time())
        assert held["env_steps"] < STEPS // 2 and not held.get("done"), held
        st = cli.status("s1")
        assert st["agents"] == 6 and st["phase"] == "Running", st
        assert st["wire_rejections"]["too_many_streams"] == 0, st
        actors = [c for c in st["components"] if c["role"] == "actor"]
        assert actors and all(c["state"] == "Running" and c["restarts"] == 0 for c in actors), actors
        now = cli.component("s1", "learner")
        assert (now["pid"], now["restarts"]) == (learner["pid"], 0)  # the same learner process
        scaled(cli, "s1", 2)  # its block continues what this one froze, and ends the hold
    st = cli.status("s1")
    print(f"second scale done at {held['env_steps']} env steps (a status of the held run)")
    assert st["agents"] == 2
    assert [c["name"] for c in st["components"] if c["role"] == "actor"] == ["actor-0", "actor-1"]
    assert cli.component("s1", "learner")["pid"] == learner["pid"]

    final = wait_for(lambda: ended(cli, "s1"), RUN_TIMEOUT * 3, "the run to end", poll=0.5)
    assert final["phase"] == "Succeeded" and final["env_steps"] >= STEPS, final
    assert final["wire_rejections"]["too_many_streams"] == 0, final
    assert final["agents"] == 2 and cli.run("list", "-o", "json").stdout.count('"agents": 2') == 1


def test_scale_refuses_what_it_cannot_do(cli: Cli) -> None:
    missing = cli.run("scale", "nope", "--agents", "4", ok=False)
    assert missing.returncode == 1 and missing.stderr.strip().splitlines() == [
        f"surreal: error: no experiment named 'nope' in {cli.home / 'experiments'}"
    ]
    cli.run("create", "tiny", "--algo", "ppo", "--steps", "2000", "--agents", "1", timeout=120.0)
    done = cli.run("scale", "tiny", "--agents", "4", ok=False)
    assert done.returncode == 1 and "is not running (phase Succeeded)" in done.stderr
    pods = cli.run("scale", "tiny", "--agents", "2", "--learner-pods", "2", ok=False)
    assert (
        pods.returncode == 2
        and "--learner-pods resizes only an experiment admitted as one unit" in pods.stderr
    )
    bad = cli.run("scale", "tiny", "--agents", "0", ok=False)
    assert bad.returncode == 2 and "--agents must be an integer from 1 to 1,000,000, got 0" in bad.stderr

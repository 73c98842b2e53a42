"""`surreal scale` on a running local experiment, through the installed command: the learner is
not restarted, takes every new stream, reports the new count, and the run ends Succeeded."""

from __future__ import annotations

import pytest
from cli_harness import RUN_TIMEOUT, Cli, ended, running, wait_for

pytestmark = pytest.mark.slow
STEPS = 150_000


def test_scale_up_then_down_reaches_the_learner_and_the_run_succeeds(cli: Cli) -> None:
    # Enough steps that the run is still going after both scales on a loaded 2-core machine
    # (CartPole runs at 3-6k steps/s here; the second scale came at 27-31k steps in 3 runs); the test waits on
    # conditions, never on time. Down to 2 agents, not 1: the rest of the run goes twice as fast.
    cli.run("create", "s1", "--algo", "ppo", "--env", "CartPole-v1", "--agents", "2", "--steps", str(STEPS),
            "--seed", "1", "--detach", timeout=30.0)  # fmt: skip
    wait_for(lambda: running(cli, "s1"), 60.0, "phase Running with env steps")
    learner = cli.component("s1", "learner")

    out = cli.run("scale", "s1", "--agents", "6", timeout=150.0).stdout
    assert "6 agents" in out, out
    st = cli.status("s1")
    assert st["agents"] == 6 and st["phase"] == "Running", st
    assert st["wire_rejections"]["too_many_streams"] == 0, st
    actors = [c for c in st["components"] if c["role"] == "actor"]
    assert actors and all(c["state"] == "Running" and c["restarts"] == 0 for c in actors), actors
    now = cli.component("s1", "learner")
    assert (now["pid"], now["restarts"]) == (learner["pid"], 0)  # the same learner process

    cli.run("scale", "s1", "--agents", "2", timeout=150.0)
    st = cli.status("s1")
    print(f"second scale done at {st['env_steps']} env steps")
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

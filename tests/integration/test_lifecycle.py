"""End-to-end lifecycle of the installed `surreal` command, used as a new user would.

Every test drives `surreal` as a subprocess with its own SURREAL_HOME, bounds its runs by env steps
and every wait by an explicit timeout, and never asserts on wall time or throughput.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import psutil
import pytest
from cli_harness import RUN_TIMEOUT, Cli, ended, frozen, processes_mentioning, running, wait_for

pytestmark = pytest.mark.slow

# Small, quick runs: CartPole's preset, two agents, two-episode evaluations.
QUICK = ("--algo", "ppo", "--env", "CartPole-v1", "--agents", "2", "--seed", "1",
         "--set", "eval_episodes=2",
         "--set", "epochs=2")  # fmt: skip
CONTRACT_FIELDS = (
    "name", "algo", "env", "backend", "phase", "env_steps", "updates", "policy_version",
    "episodes", "train_return", "eval_return", "steps_per_second", "elapsed_seconds", "components",
)  # fmt: skip
COUNTERS = ("env_steps", "updates", "policy_version", "episodes")
METRICS = ("steps_per_second", "elapsed_seconds")


def recorded_processes(state: dict[str, Any]) -> list[tuple[str, int, float | None]]:
    """(name, pid, create time) of the supervisor and every component in a state.json."""
    procs = [("supervisor", state["supervisor_pid"], state.get("supervisor_create_time"))]
    for c in state["components"]:
        if c["pid"]:
            procs.append((c["name"], c["pid"], c.get("pid_create_time")))
    return procs


def still_running(procs: list[tuple[str, int, float | None]]) -> list[str]:
    """Names of the recorded processes still running (zombies and recycled pids do not count)."""
    alive = []
    for name, pid, created in procs:
        try:
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if created is None or abs(proc.create_time() - created) < 0.05:
                alive.append(f"{name} (pid {pid})")
        except psutil.NoSuchProcess:
            continue
    return alive


def alive(proc: subprocess.Popen[Any]) -> bool:
    assert proc.poll() is None, f"`surreal create` exited early with code {proc.returncode}"
    return True


def test_detached_run_status_list_logs_and_delete(cli: Cli) -> None:
    # A run that the actors cannot finish between the read of its first env steps and their freeze:
    # at 30k steps one CI run (2 xdist workers, containers beside it) had its final evaluation done
    # by the time the frozen run was asked (the learner's status.json is written about once a
    # second, and a 30k-step run takes about 5 s here).
    steps = 100_000
    out = cli.run("create", "life", *QUICK, "--steps", str(steps), "--detach", timeout=30.0)
    assert "life" in out.stdout

    actor_log = cli.exp_dir("life") / "logs" / "actor-0.log"
    seen = wait_for(lambda: actor_log.exists() and actor_log.stat().st_size > 0 and running(cli, "life"),
                    60.0, "phase Running with env steps, and a line of actor-0")  # fmt: skip
    # Actors frozen: the run cannot end while the CLI is asked about it (a `surreal status` takes
    # 1-3 s on a busy machine).
    with frozen(cli, "life"):
        st = cli.status("life")
        read = seen["env_steps"]
        assert st["env_steps"] < steps, f"the run reached its steps before the freeze (read {read})"
        assert set(CONTRACT_FIELDS) <= set(st), f"missing: {set(CONTRACT_FIELDS) - set(st)}"
        identity = (st["name"], st["algo"], st["env"], st["backend"])
        assert identity == ("life", "ppo", "CartPole-v1", "local"), identity
        for key in COUNTERS:
            assert isinstance(st[key], int) and st[key] >= 0, (key, st[key])
        for key in METRICS:
            assert isinstance(st[key], int | float), (key, st[key])
        for key in ("train_return", "eval_return"):
            assert st[key] is None or isinstance(st[key], int | float), (key, st[key])
        names = {c["name"]: c for c in st["components"]}
        assert {"learner", "actor-0", "evaluator"} <= set(names), names
        for comp in st["components"]:
            assert set(comp) >= {"name", "role", "state", "restarts"}, comp
            assert comp["restarts"] == 0 and comp["state"] == "Running", comp
        assert names["actor-0"]["role"] == "actor" and names["learner"]["role"] == "learner"

        listed = json.loads(cli.run("list", "-o", "json").stdout)
        assert [r["name"] for r in listed] == ["life"], listed
        assert listed[0]["phase"] == "Running", listed

        # Checked at the end, so that a quiet log does not hide the rest of the lifecycle.
        actor_log_while_running = cli.run("logs", "life", "actor-0").stdout

    final = wait_for(lambda: ended(cli, "life"), RUN_TIMEOUT, "the run to end", poll=0.5)
    assert final["phase"] == "Succeeded", final
    assert final["env_steps"] >= steps and final["updates"] > 0 and final["policy_version"] > 0
    assert isinstance(final["eval_return"], int | float), final  # the final policy was evaluated
    assert {c["name"]: c["state"] for c in final["components"]}["learner"] == "Succeeded"
    assert cli.status("life") == final  # status keeps working after the end
    assert json.loads(cli.run("list", "-o", "json").stdout)[0]["phase"] == "Succeeded"

    recorded = recorded_processes(cli.state("life"))
    cli.run("delete", "life")
    assert not cli.exp_dir("life").exists()
    assert still_running(recorded) == []
    assert cli.leftovers() == []
    assert json.loads(cli.run("list", "-o", "json").stdout) == []
    assert cli.run("status", "life", ok=False).returncode != 0

    assert actor_log_while_running.strip(), (
        "`surreal logs life actor-0` printed nothing while the actor was running"
    )


def test_ctrl_c_on_foreground_create_stops_everything(cli: Cli, tmp_path: Path) -> None:
    out, err = (tmp_path / "create.out").open("w"), (tmp_path / "create.err").open("w")
    proc = subprocess.Popen(
        cli.argv("create", "fg", *QUICK, "--steps", "1000000"),
        env=cli.env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
        start_new_session=True,  # like a terminal's job: only the CLI gets our SIGINT
    )  # fmt: skip
    try:
        wait_for(lambda: alive(proc) and running(cli, "fg"), 60.0, "env steps")
        recorded = recorded_processes(cli.state("fg"))
        spec_path = cli.exp_dir("fg") / "spec.yaml"
        assert processes_mentioning(str(spec_path)), "components should name their spec file"

        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60.0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        out.close()
        err.close()

    assert code == 130, (code, (tmp_path / "create.err").read_text())
    # The supervisor is the CLI itself here; every component it started must be gone.
    assert still_running(recorded) == []
    assert processes_mentioning(str(spec_path), str(spec_path.resolve())) == []
    st = cli.status("fg")
    assert st["phase"] == "Stopped", st
    assert all(c["state"] == "Stopped" for c in st["components"]), st["components"]
    assert (st["env_steps"] or 0) > 0


def test_delete_of_a_running_detached_experiment_stops_every_process(cli: Cli) -> None:
    cli.run("create", "doomed", *QUICK, "--steps", "1000000", "--detach", timeout=30.0)
    wait_for(lambda: running(cli, "doomed"), 60.0, "phase Running with env steps")
    recorded = recorded_processes(cli.state("doomed"))
    assert len(recorded) >= 4  # the supervisor, a learner, an evaluator and actors
    assert len(still_running(recorded)) == len(recorded)

    cli.run("delete", "doomed")

    assert not cli.exp_dir("doomed").exists()
    assert still_running(recorded) == []
    assert cli.leftovers() == []
    assert json.loads(cli.run("list", "-o", "json").stdout) == []

"""The local Supervisor with tiny `python -c` components: restarts, outcomes, stopping, cleanup."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from surreal.orchestrator.local.processes import read_state
from surreal.orchestrator.local.sched_slice import current_slice_ns, slice_ms_from_env, slice_request
from surreal.orchestrator.local.supervisor import Supervisor, actor_cpus
from surreal.orchestrator.policy import POLICIES, RolePolicy
from surreal.orchestrator.program import Component, Program

SLEEP = "import time; time.sleep(600)"
WAIT_FOR_DONE = "import os, time\nwhile not os.path.exists('done'): time.sleep(0.02)"


def py(name: str, role: str, code: str, **kw: Any) -> Component:
    return Component(name, role, (sys.executable, "-c", textwrap.dedent(code)), **kw)


def wait_for(pred: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def by_name(state: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in (state or {}).get("components", [])}


def running(exp_dir: Path, *names: str) -> dict[str, dict[str, Any]] | None:
    comps = by_name(read_state(exp_dir))
    ok = all(comps.get(n, {}).get("state") == "Running" for n in names)
    return comps if ok else None


def start_in_thread(sup: Supervisor) -> tuple[threading.Thread, list[str]]:
    result: list[str] = []
    thread = threading.Thread(target=lambda: result.append(sup.run()), daemon=True)
    thread.start()
    return thread, result


@contextlib.contextmanager
def until_done(sup: Supervisor, exp_dir: Path) -> Iterator[list[str]]:
    """Run `sup` in a thread for the block, then let the WAIT_FOR_DONE learner finish; always stop
    and join. Yields the list that receives run()'s phase."""
    thread, result = start_in_thread(sup)
    try:
        yield result
        (exp_dir / "done").touch()
        thread.join(15)
    finally:
        sup.request_stop()
        thread.join(15)


def fast(retries: int = POLICIES["learner"].retries) -> dict[str, RolePolicy]:
    """The failure policies with a short backoff (and `retries`), so that tests stay quick."""
    return {
        role: dataclasses.replace(p, backoff_seconds=0.02, retries=retries) for role, p in POLICIES.items()
    }


def test_crash_is_restarted_counted_and_logged(tmp_path: Path) -> None:
    # Crashes once (leaving a marker in its cwd = exp_dir), then succeeds as the learner.
    code = """
        import os, sys
        print('hello from', os.environ['WHO'])
        if not os.path.exists('crashed'):
            open('crashed', 'w').close()
            sys.exit(3)
    """
    program = Program("exp", (py("learner", "learner", code, env={"WHO": "the learner"}),))
    ticks: list[float] = []
    sup = Supervisor(program, tmp_path, policies=fast())
    phase = sup.run(on_tick=lambda: ticks.append(time.monotonic()), tick_seconds=0.01)

    assert phase == "Succeeded"
    state = read_state(tmp_path)
    assert state is not None and state["phase"] == "Succeeded"
    assert state["supervisor_pid"] == os.getpid()
    assert state["started_at"] <= state["ended_at"]
    learner = by_name(state)["learner"]
    assert (learner["state"], learner["restarts"], learner["exit_code"]) == ("Succeeded", 1, 0)
    log = (tmp_path / "logs" / "learner.log").read_text()
    assert log.count("hello from the learner") == 2
    assert "exit code 3; restarting" in log and "restarted (restart 1; 1 failures)" in log
    assert ticks


def test_sigkilled_component_is_restarted(tmp_path: Path) -> None:
    program = Program("exp", (py("learner", "learner", WAIT_FOR_DONE), py("actor-0", "actor", SLEEP)))
    sup = Supervisor(program, tmp_path, policies=fast(), grace_seconds=2.0)
    with until_done(sup, tmp_path) as result:
        first = wait_for(lambda: running(tmp_path, "learner", "actor-0"), what="Running")
        old_pid = first["actor-0"]["pid"]
        os.kill(old_pid, signal.SIGKILL)

        def restarted() -> dict[str, Any] | None:
            actor = by_name(read_state(tmp_path))["actor-0"]
            fresh = actor["state"] == "Running" and actor["pid"] != old_pid
            return actor if fresh and actor["restarts"] == 1 else None

        actor = wait_for(restarted, what="actor restarted")
    assert result == ["Succeeded"]
    final = by_name(read_state(tmp_path))
    assert final["learner"]["state"] == "Succeeded"
    assert (final["actor-0"]["state"], final["actor-0"]["restarts"]) == ("Stopped", 1)
    assert all(gone(pid) for pid in (old_pid, actor["pid"], first["learner"]["pid"]))
    assert "killed by SIGKILL; restarting" in (tmp_path / "logs" / "actor-0.log").read_text()


def test_component_that_always_crashes_fails_the_experiment(tmp_path: Path) -> None:
    program = Program(
        "exp",
        (py("learner", "learner", SLEEP), py("actor-0", "actor", "import sys; sys.exit(2)")),
    )
    sup = Supervisor(program, tmp_path, policies=fast(retries=2), grace_seconds=2.0)
    assert sup.run() == "Failed"
    state = read_state(tmp_path)
    assert state is not None and state["phase"] == "Failed"
    comps = by_name(state)
    assert (comps["actor-0"]["state"], comps["actor-0"]["restarts"]) == ("Failed", 2)
    assert comps["actor-0"]["exit_code"] == 2
    assert comps["learner"]["state"] == "Stopped"
    assert gone(comps["learner"]["pid"])
    assert "giving up after 3 failures" in (tmp_path / "logs" / "actor-0.log").read_text()
    assert state["problem"] == "no actor is left to feed the learner: actor-0 failed (exit code 2)"


def test_a_fatal_exit_fails_the_learner_at_once_with_the_reason_it_left(tmp_path: Path) -> None:
    # What a learner whose ranks never formed their group does (surreal.component).
    last_words = """
        import json, os, sys
        reason = "learner rank 1 of 2 did not join the group within 60 s"
        with open(os.environ["SURREAL_TERMINATION_LOG"], "w") as f:
            json.dump({"phase": "Failed", "exit_code": 70, "reason": reason}, f)
        sys.exit(70)
    """
    program = Program("exp", (py("learner", "learner", last_words), py("actor-0", "actor", SLEEP)))
    sup = Supervisor(program, tmp_path, grace_seconds=2.0)
    assert sup.run() == "Failed"
    state = read_state(tmp_path)
    assert state is not None
    comps = by_name(state)
    assert (comps["learner"]["state"], comps["learner"]["restarts"]) == ("Failed", 0)
    assert state["problem"] == (
        "the learner failed (exit code 70: learner rank 1 of 2 did not join the group within 60 s)"
    )


def test_learner_success_stops_the_others_even_stubborn_ones(tmp_path: Path) -> None:
    stubborn = """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open('stubborn.ready', 'w').close()
        time.sleep(600)
    """
    parent = """
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])
        open('g.tmp', 'w').write(str(child.pid))
        os.replace('g.tmp', 'grandchild.pid')
        time.sleep(600)
    """
    learner = """
        import os, time
        while not (os.path.exists('stubborn.ready') and os.path.exists('grandchild.pid')):
            time.sleep(0.02)
    """
    program = Program(
        "exp",
        (
            py("learner", "learner", learner),
            py("stubborn", "actor", stubborn),
            py("parent", "actor", parent, index=1),
        ),
    )
    started = time.monotonic()
    assert Supervisor(program, tmp_path, grace_seconds=0.5).run() == "Succeeded"
    assert time.monotonic() - started < 10
    comps = by_name(read_state(tmp_path))
    assert comps["learner"]["state"] == "Succeeded"
    assert (comps["stubborn"]["state"], comps["stubborn"]["exit_code"]) == ("Stopped", -9)
    assert comps["parent"]["state"] == "Stopped"
    assert "SIGKILL" in (tmp_path / "logs" / "stubborn.log").read_text()
    grandchild = int((tmp_path / "grandchild.pid").read_text())
    assert all(gone(pid) for pid in (grandchild, comps["stubborn"]["pid"], comps["parent"]["pid"]))


def test_unstartable_component_fails_and_finished_workers_succeed(tmp_path: Path) -> None:
    bad = Program("exp", (Component("learner", "learner", ("/nonexistent/surreal-binary",)),))
    assert Supervisor(bad, tmp_path / "bad").run() == "Failed"
    assert "failed to start" in (tmp_path / "bad" / "logs" / "learner.log").read_text()

    # No learner: the experiment ends when every component has ended on its own.
    done = Program("exp", (py("a", "actor", "pass"), py("b", "actor", "pass", index=1)))
    assert Supervisor(done, tmp_path / "done").run() == "Succeeded"
    assert {c["state"] for c in by_name(read_state(tmp_path / "done")).values()} == {"Succeeded"}


FOREGROUND = """
import sys
from surreal.orchestrator.program import Component, Program
from surreal.orchestrator.status import exit_code
from surreal.orchestrator.local.sched_slice import current_slice_ns, slice_ms_from_env, slice_request
from surreal.orchestrator.local.supervisor import Supervisor, actor_cpus
sleep = (sys.executable, '-c', 'import time; time.sleep(600)')
program = Program('exp', (Component('learner', 'learner', sleep),
                          Component('actor-0', 'actor', sleep)))
sys.exit(exit_code(Supervisor(program, sys.argv[1], grace_seconds=2.0).run()))
"""


def _foreground(tmp_path: Path) -> tuple[subprocess.Popen[bytes], list[int]]:
    exp_dir = tmp_path / "exp"
    proc = subprocess.Popen([sys.executable, "-c", FOREGROUND, str(exp_dir)])
    try:
        comps = wait_for(lambda: running(exp_dir, "learner", "actor-0"), what="Running")
    except AssertionError:
        proc.kill()
        raise
    return proc, [c["pid"] for c in comps.values()]


def test_sigint_to_foreground_supervisor_leaves_nothing_behind(tmp_path: Path) -> None:
    proc, pids = _foreground(tmp_path)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=15) == 130
    state = read_state(tmp_path / "exp")
    assert state is not None and state["phase"] == "Stopped"
    assert {c["state"] for c in state["components"]} == {"Stopped"}
    assert all(gone(pid) for pid in pids)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_sigkilled_supervisor_takes_its_children_along(tmp_path: Path) -> None:
    proc, pids = _foreground(tmp_path)
    proc.kill()
    proc.wait(timeout=5)
    wait_for(lambda: all(gone(pid) for pid in pids), timeout=5, what="children to die")
    state = json.loads((tmp_path / "exp" / "state.json").read_text())
    assert state["phase"] == "Running"  # nobody could write the end; current_phase() says Failed


# --- CPU pinning of actors ---

ALLOWED = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
needs_two_cpus = pytest.mark.skipif(len(ALLOWED) < 2, reason="needs Linux and at least 2 allowed CPUs")


def _three_actors(code: str = SLEEP) -> Program:
    return Program(
        "exp",
        (py("learner", "learner", WAIT_FOR_DONE), py("evaluator", "evaluator", SLEEP))
        + tuple(py(f"actor-{i}", "actor", code, index=i) for i in range(3)),
    )


@needs_two_cpus
def test_actors_are_spread_round_robin_over_the_allowed_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SURREAL_PIN_ACTORS", raising=False)
    cpus = actor_cpus(_three_actors())
    assert cpus == {"actor-0": ALLOWED[0], "actor-1": ALLOWED[1], "actor-2": ALLOWED[2 % len(ALLOWED)]}
    assert actor_cpus(_three_actors(), pin=False) == {}
    monkeypatch.setenv("SURREAL_PIN_ACTORS", "0")
    assert actor_cpus(_three_actors()) == {}


@needs_two_cpus
def test_running_actors_are_pinned_and_the_learner_is_not(tmp_path: Path) -> None:
    with until_done(Supervisor(_three_actors(), tmp_path, grace_seconds=2.0), tmp_path) as result:
        names = ("learner", "evaluator", "actor-0", "actor-1", "actor-2")
        comps = wait_for(lambda: running(tmp_path, *names), what="Running")
        affinity = {n: sorted(os.sched_getaffinity(comps[n]["pid"])) for n in names}
    assert result == ["Succeeded"]
    assert affinity["learner"] == affinity["evaluator"] == ALLOWED
    assert [affinity[f"actor-{i}"] for i in range(3)] == [[ALLOWED[i % len(ALLOWED)]] for i in range(3)]


# --- scheduler time slices ---


def _kernel_honours_slices() -> bool:
    """Linux >= 6.12 reports a custom slice back; older kernels accept and ignore it."""
    request = slice_request(37.0)
    if request is None:
        return False
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"], preexec_fn=request)
    try:
        return current_slice_ns(child.pid) == 37_000_000
    finally:
        child.kill()
        child.wait()


needs_slices = pytest.mark.skipif(not _kernel_honours_slices(), reason="needs Linux >= 6.12 (EEVDF slices)")


@pytest.mark.parametrize(("value", "expected"), [("", 100.0), ("20", 20.0), ("0", 0.0)])
def test_slice_setting_is_read_from_the_environment(monkeypatch, value, expected) -> None:
    monkeypatch.setenv("SURREAL_SCHED_SLICE_MS", value)
    assert slice_ms_from_env() == expected


@pytest.mark.parametrize("value", ["-1", "101", "fast"])
def test_bad_slice_setting_names_the_variable(monkeypatch, value) -> None:
    monkeypatch.setenv("SURREAL_SCHED_SLICE_MS", value)
    with pytest.raises(ValueError, match="SURREAL_SCHED_SLICE_MS"):
        slice_ms_from_env()


@needs_slices
@pytest.mark.parametrize("slice_ms", [100.0, 0.0])
def test_components_run_with_the_requested_time_slice(tmp_path: Path, slice_ms: float) -> None:
    default = current_slice_ns(os.getpid())
    sup = Supervisor(_three_actors(), tmp_path, grace_seconds=2.0, slice_ms=slice_ms)
    with until_done(sup, tmp_path) as result:
        names = ("learner", "evaluator", "actor-0", "actor-1", "actor-2")
        comps = wait_for(lambda: running(tmp_path, *names), what="Running")
        slices = {n: current_slice_ns(comps[n]["pid"]) for n in names}
    assert result == ["Succeeded"]
    expected = int(slice_ms * 1e6) if slice_ms else default
    assert slices == dict.fromkeys(names, expected)


def test_a_private_write_is_never_readable_by_others(tmp_path: Path) -> None:
    import os
    import stat

    from surreal.orchestrator.local.supervisor import write_json_atomic

    old = os.umask(0)  # the mode must not depend on the caller's umask
    try:
        write_json_atomic(tmp_path / "record.json", {"token": "s3cret"}, 0o600)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "record.json").stat().st_mode) == 0o600
    assert json.loads((tmp_path / "record.json").read_text()) == {"token": "s3cret"}

"""`surreal scale` on the local backend, at the supervisor: a new program.json is taken while the
experiment runs; actors come, go or restart with their new command, and the learner stays."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from test_local_supervisor import SLEEP, WAIT_FOR_DONE, by_name, gone, py, running, start_in_thread, wait_for

from surreal.orchestrator.local.processes import read_state, save_program
from surreal.orchestrator.local.supervisor import Supervisor
from surreal.orchestrator.program import (
    ENV_AGENTS_IN_WORKER,
    Program,
    Target,
    local_split,
    make_program,
    rescaled,
)
from surreal.spec import build_spec


def program(actors: int) -> Program:
    learner = py("learner", "learner", WAIT_FOR_DONE)
    workers = [
        py(f"actor-{i}", "actor", SLEEP, index=i, env={ENV_AGENTS_IN_WORKER: "1"}) for i in range(actors)
    ]
    return Program("exp", (learner, *workers))


def test_rescaled_repacks_actors_and_keeps_learner_and_evaluator() -> None:
    target = Target(
        spec_path="/x/spec.yaml", learner_addr="127.0.0.1:7000", bind_host="127.0.0.1", exp_dir="/x"
    )
    before = make_program(
        build_spec("s1", flags={"algo": "ppo", "agents": 2}), target, local_split(2, cpus=2)
    )
    after = rescaled(before, local_split(6, cpus=2))
    assert after.component("learner") == before.component("learner")
    assert after.component("evaluator") == before.component("evaluator")
    assert [(c.name, c.env[ENV_AGENTS_IN_WORKER], c.argv[-1]) for c in after.group("actor")] == [
        ("actor-0", "3", "0"),
        ("actor-1", "3", "1"),
    ]
    assert [c.name for c in rescaled(before, local_split(1, cpus=2)).group("actor")] == ["actor-0"]
    with pytest.raises(ValueError, match="at least one agent"):
        rescaled(before, [])


def test_a_new_program_starts_stops_and_restarts_actors_but_never_the_learner(tmp_path: Path) -> None:
    save_program(program(2), tmp_path)
    sup = Supervisor(program(2), tmp_path, grace_seconds=5.0, pin_actors=False)
    thread, result = start_in_thread(sup)
    try:
        before = wait_for(
            lambda: running(tmp_path, "learner", "actor-0", "actor-1"), what="the first program"
        )
        # Up: actor-0 gets another command (3 agents), actor-1 stays, actor-2 is new.
        up = program(3)
        changed = dataclasses.replace(up.component("actor-0"), env={ENV_AGENTS_IN_WORKER: "3"})
        up = Program("exp", tuple(changed if c.name == "actor-0" else c for c in up.components))
        save_program(up, tmp_path)
        after = wait_for(
            lambda: (
                (s := running(tmp_path, "learner", "actor-0", "actor-1", "actor-2"))
                and s["actor-0"]["pid"] != before["actor-0"]["pid"]
                and s
            ),
            what="the scaled-up program",
        )
        assert after["learner"]["pid"] == before["learner"]["pid"] and after["learner"]["restarts"] == 0
        assert after["actor-1"]["pid"] == before["actor-1"]["pid"]
        assert gone(before["actor-0"]["pid"])
        assert after["actor-0"]["restarts"] == 0  # a new command is not a crash
        # Down: only actor-0 is left; the others are stopped and leave the state.
        save_program(program(1), tmp_path)
        wait_for(lambda: set(by_name(read_state(tmp_path))) == {"learner", "actor-0"}, what="the scale-down")
        wait_for(
            lambda: gone(after["actor-1"]["pid"]) and gone(after["actor-2"]["pid"]), what="retired actors"
        )
        # The supervisor notes the retirement once it has reaped the process (after `gone`).
        log = tmp_path / "logs" / "actor-2.log"
        wait_for(lambda: "retired" in log.read_text(), what="the retirement in actor-2's log")
        assert "no longer in the program; stopping (SIGTERM)" in log.read_text()
        assert running(tmp_path, "learner")["learner"]["pid"] == before["learner"]["pid"]
    finally:
        (tmp_path / "done").touch()
        thread.join(30)
    assert result == ["Succeeded"]


def test_an_unreadable_program_is_ignored(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    save_program(program(1), tmp_path)
    sup = Supervisor(program(1), tmp_path, pin_actors=False)
    thread, result = start_in_thread(sup)
    try:
        before = wait_for(lambda: running(tmp_path, "learner", "actor-0"), what="the program")
        (tmp_path / "program.json").write_text('{"experiment": "exp", "components": [{"name": "x"}]}')
        wait_for(lambda: "ignoring an unreadable" in caplog.text, what="the supervisor to read it")
        # Nothing changed; the supervisor goes on with what it runs.
        assert running(tmp_path, "learner", "actor-0")["actor-0"]["pid"] == before["actor-0"]["pid"]
    finally:
        (tmp_path / "done").touch()
        thread.join(30)
    assert result == ["Succeeded"]


def test_a_program_that_changes_the_learner_is_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    save_program(program(1), tmp_path)
    sup = Supervisor(program(1), tmp_path, pin_actors=False)
    thread, result = start_in_thread(sup)
    try:
        before = wait_for(lambda: running(tmp_path, "learner", "actor-0"), what="the program")
        renamed = Program("exp", (py("learner2", "learner", WAIT_FOR_DONE), *program(1).components[1:]))
        save_program(renamed, tmp_path)
        wait_for(lambda: "it changes the learner" in caplog.text, what="the supervisor to refuse it")
        assert set(by_name(read_state(tmp_path))) == {"learner", "actor-0"}
        assert running(tmp_path, "learner")["learner"]["pid"] == before["learner"]["pid"]
    finally:
        (tmp_path / "done").touch()
        thread.join(30)
    assert result == ["Succeeded"]

"""A replay shard and the local launcher against their disk: a save that cannot be read back is set
aside and counted lost, never a crash loop; a save or a note the disk will not take is counted and
cleaned up; nothing is saved once the run is done or deleted; the supervisor and `delete` go on
when the disk is full."""

from __future__ import annotations

import errno
import json
import logging
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from surreal.algorithms.sac import SACConfig
from surreal.orchestrator.local import processes, supervisor
from surreal.orchestrator.local.supervisor import Supervisor
from surreal.orchestrator.program import Component, Program
from surreal.orchestrator.status import Phase
from surreal.runtime.envs.make import spaces_for
from surreal.runtime.exits import EXIT_PREEMPTED
from surreal.runtime.offpolicy import shard as shard_module
from surreal.runtime.offpolicy.replay import DELETING_FILE
from surreal.runtime.offpolicy.shard import Shard, fields

CFG = SACConfig(buffer_size=1000, learning_starts=8, replay_ratio=4.0, batch_size=4, fragment_length=8)
SP = spaces_for("Pendulum-v1")
FULL = OSError(errno.ENOSPC, "No space left on device")


def _shard(exp_dir: Path, rows: int = 24) -> Shard:
    """A started shard holding `rows` honest rows."""
    shard = Shard(CFG, SP, 0, 1, exp_dir)
    shard.restore()
    rng = np.random.default_rng(0)
    shard.rows.add({name: rng.uniform(-1, 1, (rows, *shape)).astype(dtype) for name, (dtype, shape)
                    in fields(SP).items()})  # fmt: skip
    shard.limiter.await_insert(rows, 0)
    return shard


def _replacement(exp_dir: Path) -> Shard:
    shard = Shard(CFG, SP, 0, 1, exp_dir)
    shard.restore()
    return shard


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.floats(0.0, 0.999))
def test_a_truncated_save_is_set_aside_and_its_rows_counted_lost(tmp_path: Path, cut: float) -> None:
    exp_dir = tmp_path / str(cut)
    _shard(exp_dir).save()
    path = exp_dir / "replay" / "shard-0.npz"
    data = path.read_bytes()
    path.write_bytes(data[: int(cut * len(data))])  # what a full disk or a killed copy leaves
    after = _replacement(exp_dir)
    state = after.state()
    assert (after.rows.size, state.restored, state.lost, state.inserted) == (0, 0, 24, 24)
    assert not path.exists() and path.with_name("shard-0.npz.unreadable").exists()
    assert _replacement(exp_dir).state().lost == 24  # counted once, and never read again


def test_restored_rows_pass_the_checks_an_insert_gets(tmp_path: Path, caplog) -> None:
    shard = _shard(tmp_path)
    shard.rows.data["rewards"][3] = 1e9  # beyond max_abs_reward: no actor could have sent it
    shard.save()
    with caplog.at_level(logging.ERROR):
        after = _replacement(tmp_path)
    assert (after.rows.size, after.state().lost) == (0, 24)
    [line] = [r.getMessage() for r in caplog.records]
    assert "shard-0.npz" in line and "max_abs_reward" in line and "unreadable" in line
    np.savez(tmp_path / "replay" / "shard-0.npz", **{name: np.zeros((2, 7)) for name in fields(SP)})
    assert _replacement(tmp_path).rows.size == 0  # other shapes and dtypes: the same


def test_a_save_the_disk_will_not_take_leaves_nothing_and_counts_its_rows_lost(tmp_path, monkeypatch) -> None:
    shard = _shard(tmp_path)

    def half_then_full(file: Path, **arrays: np.ndarray) -> None:
        Path(file).write_bytes(b"PK" * 1000)  # a partial zip, as ENOSPC leaves it
        raise FULL

    monkeypatch.setattr(np, "savez", half_then_full)
    shard.save()
    assert sorted(p.name for p in (tmp_path / "replay").iterdir()) == ["shard-0.json"]
    assert (shard.state().lost, shard.rows.size) == (24, 0)
    after = _replacement(tmp_path)
    assert (after.state().lost, after.state().inserted) == (24, 24)  # not counted twice


def test_a_note_the_disk_will_not_take_is_said_once_and_the_shard_goes_on(
    tmp_path, monkeypatch, caplog
) -> None:
    shard = _shard(tmp_path)
    monkeypatch.setattr(shard_module, "write_json", lambda path, data: (_ for _ in ()).throw(FULL))
    monkeypatch.setattr(np, "savez", lambda file, **arrays: (_ for _ in ()).throw(FULL))
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            shard.note()
        shard.save()  # SIGTERM on a full disk: the rows and the note both fail, nothing raises
    assert len(caplog.records) == 2 and "No space left" in caplog.records[0].getMessage()
    assert not (tmp_path / "replay" / "shard-0.npz.tmp.npz").exists()


@pytest.mark.parametrize(("status", "deleting", "code", "saved"), [
    ({"env_steps": 500}, False, EXIT_PREEMPTED, True),  # mid-run preemption: kept for the replacement
    ({"env_steps": 1000}, False, 0, False),  # the learner finished (and may be gone): nothing to keep
    ({"env_steps": 500}, True, EXIT_PREEMPTED, False),  # being deleted: no replacement will read it
    (None, False, EXIT_PREEMPTED, True),
])  # fmt: skip
def test_a_sigterm_saves_only_for_a_replacement(tmp_path, status, deleting, code, saved) -> None:
    from surreal.runtime.run import RunContext

    shard = _shard(tmp_path)
    if status is not None:
        (tmp_path / "status.json").write_text(json.dumps(status))
    if deleting:
        (tmp_path / DELETING_FILE).touch()
    ctx = RunContext("Pendulum-v1", 0, 1000, 1, tmp_path, "127.0.0.1:1", "t")
    assert shard_module._stop(shard, shard_module._run_over(ctx), tmp_path) == code
    assert (tmp_path / "replay" / "shard-0.npz").exists() == saved


def _program(exp_dir: Path) -> Program:
    learner = Component("learner", "learner", (sys.executable, "-c", "import sys; sys.exit(0)"))
    return Program("full", (learner,))


def test_the_supervisor_ends_a_run_with_its_phase_on_a_full_disk(tmp_path, monkeypatch, caplog) -> None:
    monkeypatch.setattr(supervisor, "write_json_atomic", lambda *a, **k: (_ for _ in ()).throw(FULL))
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "learner.log").symlink_to("/dev/full")  # its log takes no line either
    with caplog.at_level(logging.ERROR):
        phase = Supervisor(_program(tmp_path), tmp_path, grace_seconds=1.0).run()
    assert phase == Phase.SUCCEEDED
    assert len([r for r in caplog.records if "cannot write" in r.getMessage()]) == 1


def test_delete_removes_a_run_on_a_full_disk(tmp_path, monkeypatch) -> None:
    from surreal.orchestrator.local.experiment import delete

    home = tmp_path / "home"
    exp_dir = home / "experiments" / "full"
    exp_dir.mkdir(parents=True)
    (exp_dir / "state.json").write_text(json.dumps({"phase": "Running", "components": [],
                                                    "supervisor_pid": None}))  # fmt: skip
    monkeypatch.setattr(processes, "write_json_atomic", lambda *a, **k: (_ for _ in ()).throw(FULL))
    delete(home, "full")
    assert not exp_dir.exists()

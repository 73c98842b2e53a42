"""A replay that could not be held is refused at create (issue 49): locally and in containers
against this machine's available memory, in one line naming buffer_size, what the shards need and
what there is; exit 2, nothing created, instead of shards that crash-loop on their allocation."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from cli_world import one_line, snapshot, surreal

from surreal.orchestrator.program import replay_memory_mb
from surreal.spec import SpecError, build_spec, check_replay_memory

GIB = 2**30
SAC = ("--algo", "sac", "--env", "Pendulum-v1")


def _available(monkeypatch: pytest.MonkeyPatch, nbytes: int) -> None:
    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(available=nbytes))


@pytest.mark.parametrize("backend", ["local", "containers"])
def test_a_replay_past_the_machines_memory_is_one_line_and_creates_nothing(
    backend: str, surreal_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _available(monkeypatch, 8 * GIB)
    before = snapshot(surreal_home.parent)
    code, out, err = surreal(capsys, "create", "big", *SAC, "--backend", backend,
                             "--replay-shards", "2", "--set", "buffer_size=1e10")  # fmt: skip
    line = one_line(err)
    assert code == 2 and out == ""
    # Pendulum's transition: 3 + 3 observation floats, an action and a reward (float32), an end byte.
    need = 2 * (256 + -(-5 * 10**9 * 33 // 2**20)) * 2**20
    assert (f"sac.buffer_size 10,000,000,000: the replay needs {need / GIB:,.1f} GiB of memory and this "
            "machine has 8.0 GiB available: lower buffer_size") in line  # fmt: skip
    assert snapshot(surreal_home.parent) == before


def test_the_machine_check_is_at_the_bytes_the_shards_ask_for() -> None:
    spec = build_spec("x", flags={"algo": "sac", "env": "Pendulum-v1", "replay_shards": 3})
    for rows in (1, 10**6, 12_345_679):
        sized = dataclasses.replace(spec, config=dataclasses.replace(spec.config, buffer_size=rows))
        need = 3 * replay_memory_mb(sized) * 2**20  # what each shard's process or container is given
        check_replay_memory(sized, available=need)
        with pytest.raises(SpecError, match="the replay needs"):
            check_replay_memory(sized, available=need - 1)


def test_a_replay_that_fits_is_created_as_before(
    surreal_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _available(monkeypatch, 8 * GIB)
    code, out, err = surreal(capsys, "create", "ok", "--algo", "sac", "--env", "Pendulum-v1", "--dry-run")
    assert (code, err) == (0, "") and "buffer_size: 1000000" in out


def test_algorithms_without_replay_are_not_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    _available(monkeypatch, 0)
    assert build_spec("x", flags={"algo": "ppo"}).algo == "ppo"

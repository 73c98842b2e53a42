"""`surreal scale` on the learner side: scale.json read as hostile input, and ServingLoop following it
(the server's stream capacity, the core, status "agents")."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import surreal.runtime.scale as scale
import surreal.runtime.serving as serving
from surreal.protocol.ratelimit import RejectionLog
from surreal.protocol.types import EvalReport, Params
from surreal.runtime.run import RunContext, progress_extras
from surreal.runtime.scale import MAX_SCALE_AGENTS, MAX_SCALE_BYTES, SCALE_FILE, read_scale
from surreal.runtime.serving import ServingLoop, initial_agents, max_streams


def write_scale(exp_dir: Path, content: str | bytes) -> None:
    """As the launcher does: a temporary file in the same folder, then os.replace."""
    tmp = exp_dir / f".{SCALE_FILE}.tmp"
    tmp.write_bytes(content.encode() if isinstance(content, str) else content)
    os.replace(tmp, exp_dir / SCALE_FILE)


@pytest.fixture(autouse=True)
def fresh_rejection_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees the first bad file logged (the module's log is shared by the process)."""
    rejections = RejectionLog(scale.log, "scale file", interval=60.0)
    monkeypatch.setattr(scale, "_rejections", lambda: rejections)


def test_a_missing_file_means_no_scale(tmp_path: Path) -> None:
    assert read_scale(tmp_path) is None
    assert read_scale(tmp_path / "no-such-dir") is None


def test_a_valid_file_gives_its_count(tmp_path: Path) -> None:
    write_scale(tmp_path, json.dumps({"agents": 6}))
    assert read_scale(tmp_path) == 6
    assert read_scale(str(tmp_path)) == 6
    write_scale(tmp_path, '{"agents": 1, "by": "surreal scale"}')  # other keys are ignored
    assert read_scale(tmp_path) == 1
    write_scale(tmp_path, json.dumps({"agents": MAX_SCALE_AGENTS}))
    assert read_scale(tmp_path) == MAX_SCALE_AGENTS


@pytest.mark.parametrize(
    "content",
    [
        "",
        "{",
        "6",
        "[6]",
        '"6"',
        "null",
        "{}",
        '{"agents": "6"}',
        '{"agents": 6.0}',
        '{"agents": true}',
        '{"agents": null}',
        '{"agents": NaN}',
        '{"agents": [6]}',
        '{"Agents": 6}',
        b"\xff\xfe{",  # not UTF-8
        "[" * 100_000,  # nesting that would blow the parser's stack (and too long anyway)
        "[" * 2000 + "]" * 2000,  # deep, within the size limit
    ],
)
def test_a_malformed_file_is_ignored(tmp_path: Path, content: str | bytes) -> None:
    write_scale(tmp_path, content)
    assert read_scale(tmp_path) is None


@pytest.mark.parametrize("agents", [0, -1, -(10**6), MAX_SCALE_AGENTS + 1, 10**18, int("9" * 1000)])
def test_a_count_out_of_range_is_ignored(tmp_path: Path, agents: int) -> None:
    write_scale(tmp_path, json.dumps({"agents": agents}))
    assert read_scale(tmp_path) is None


def test_a_file_too_long_is_refused_unparsed(tmp_path: Path) -> None:
    write_scale(tmp_path, '{"agents": 6}' + " " * MAX_SCALE_BYTES)
    assert read_scale(tmp_path) is None


def test_what_is_not_a_regular_file_is_refused_without_blocking(tmp_path: Path) -> None:
    (tmp_path / SCALE_FILE).mkdir()
    assert read_scale(tmp_path) is None
    (tmp_path / SCALE_FILE).rmdir()
    os.mkfifo(tmp_path / SCALE_FILE)  # opening a FIFO to read would block until a writer came
    assert read_scale(tmp_path) is None
    (tmp_path / SCALE_FILE).unlink()
    (tmp_path / SCALE_FILE).symlink_to("/dev/zero")  # endless bytes
    assert read_scale(tmp_path) is None


def test_a_regular_file_behind_a_symlink_counts(tmp_path: Path) -> None:
    (tmp_path / "elsewhere.json").write_text('{"agents": 3}')
    (tmp_path / SCALE_FILE).symlink_to(tmp_path / "elsewhere.json")
    assert read_scale(tmp_path) == 3


def test_bad_files_are_logged_once_then_at_a_bounded_rate(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.WARNING, logger=scale.log.name)
    for i in range(200):
        write_scale(tmp_path, f'{{"agents": -{i}, "junk": "{"x" * 1000}\n\x1b[2J"}}')
        assert read_scale(tmp_path) is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and SCALE_FILE in lines[0]
    assert len(lines[0]) < 400 and "\x1b" not in lines[0]


def test_initial_agents_prefers_the_last_scale(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    assert initial_agents(ctx) == 2
    write_scale(tmp_path, '{"agents": 5}')
    assert initial_agents(ctx) == 5
    write_scale(tmp_path, '{"agents": 0}')
    assert initial_agents(ctx) == 2


# ---- ServingLoop


class FakeCore:
    final_evaluated = False
    holding = False
    done = False
    cfg = SimpleNamespace(progress_deadline_seconds=600.0)

    def __init__(self) -> None:
        self.agents: list[int] = []
        self.version = 0
        self.counters = SimpleNamespace(env_steps=0, updates=0)

    def training_problem(self) -> str | None:
        return None

    def ready(self) -> bool:
        return False

    def update(self) -> Any:
        return {}

    def new_version(self) -> None:
        self.version += 1

    def save(self) -> None:
        pass

    def params(self) -> Params:
        return Params(self.version, {"w": np.zeros(2, np.float32)}, progress_extras(0, False))

    def record_eval(self, report: EvalReport) -> None:
        pass

    def status(self, connected_actors: int = 0) -> dict[str, Any]:
        return {"connected_actors": connected_actors, "version": self.version}

    def set_agents(self, num_agents: int) -> None:
        self.agents.append(num_agents)
        self.version += 1  # as ES's master may: a new hand-out under a new version

    def close(self) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def context(exp_dir: Path) -> RunContext:
    return RunContext(env_id="CartPole-v1", seed=0, total_steps=100, num_agents=2, exp_dir=exp_dir,
                      learner_addr="127.0.0.1:0", token="t")  # fmt: skip


@pytest.fixture
def loop(tmp_path: Path):
    core = FakeCore()
    ctx = context(tmp_path)
    loop = ServingLoop(core, ctx, take=lambda f: None, experience_schema={}, credits_per_stream=1,
                       agents=initial_agents(ctx))  # fmt: skip
    yield loop
    loop.server.stop(grace=0)


def test_the_loop_starts_with_the_count_it_was_given_and_reports_it(loop: ServingLoop) -> None:
    assert loop.agents == 2 and loop.server.max_streams == max_streams(2)
    assert loop.snapshot["status"]["agents"] == 2
    loop.write_status()
    assert json.loads(loop.status_path.read_text())["agents"] == 2
    assert not loop.check_scale() and loop.core.agents == []  # type: ignore[attr-defined]


def test_a_new_count_reaches_the_server_the_core_and_status(loop: ServingLoop, tmp_path: Path) -> None:
    core: FakeCore = loop.core  # type: ignore[assignment]
    write_scale(tmp_path, '{"agents": 6}')
    assert loop.check_scale()
    assert loop.agents == 6 and loop.server.max_streams == max_streams(6) and core.agents == [6]
    assert loop.server._latest_version() == core.version == 1  # what the core made is published
    loop.write_status()
    assert json.loads(loop.status_path.read_text())["agents"] == 6
    assert loop.snapshot["status"]["agents"] == 6
    write_scale(tmp_path, '{"agents": 6}')  # rewritten, the same count: nothing to do
    assert not loop.check_scale() and core.agents == [6]
    write_scale(tmp_path, '{"agents": 1}')
    assert loop.check_scale() and loop.server.max_streams == max_streams(1) and core.agents == [6, 1]


def test_an_unchanged_file_is_not_read_again(loop: ServingLoop, tmp_path: Path, monkeypatch) -> None:
    reads: list[object] = []
    monkeypatch.setattr(serving, "read_scale", lambda d: reads.append(d) or 3)
    write_scale(tmp_path, '{"agents": 3}')
    assert loop.check_scale() and len(reads) == 1
    for _ in range(5):
        assert not loop.check_scale()
    assert len(reads) == 1


def test_a_bad_or_removed_file_leaves_the_count(loop: ServingLoop, tmp_path: Path) -> None:
    write_scale(tmp_path, '{"agents": 4}')
    assert loop.check_scale() and loop.agents == 4
    write_scale(tmp_path, '{"agents": -4}')
    assert not loop.check_scale() and loop.agents == 4
    write_scale(tmp_path, "garbage")
    assert not loop.check_scale() and loop.agents == 4
    (tmp_path / SCALE_FILE).unlink()
    assert not loop.check_scale() and loop.agents == 4 and loop.server.max_streams == max_streams(4)


def test_tick_checks_about_once_a_second(loop: ServingLoop, tmp_path: Path, monkeypatch) -> None:
    clock = Clock()
    monkeypatch.setattr(serving, "time", clock)
    loop._scale_at = loop._status_at = clock.now
    write_scale(tmp_path, '{"agents": 7}')
    loop.tick()
    assert loop.agents == 2  # not yet a second since the last check
    clock.now += 1.0
    loop.tick()
    assert loop.agents == 7
    assert json.loads(loop.status_path.read_text())["agents"] == 7  # status written at once


def test_a_learner_restarted_after_a_scale_keeps_the_scaled_count(tmp_path: Path) -> None:
    write_scale(tmp_path, '{"agents": 9}')
    ctx = context(tmp_path)
    core = FakeCore()
    loop = ServingLoop(core, ctx, take=lambda f: None, experience_schema={}, credits_per_stream=1,
                       agents=initial_agents(ctx))  # fmt: skip
    try:
        assert loop.agents == 9 and loop.server.max_streams == max_streams(9)
        assert core.agents == []  # made for 9 already: nothing to change
    finally:
        loop.server.stop(grace=0)

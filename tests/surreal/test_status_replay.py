"""`surreal status` says an off-policy run's replay as docs/algorithms/sac.md does: its size, the
ratio held beside its target, the fragments refused and the rows lost, and a shard the learner
cannot reach; nothing of it for a run without replay. And every run's balance, when it has one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_world import METRICS, make_experiment, surreal

from surreal.orchestrator.home import STATUS_FILE

REPLAY = {
    "size": 19_872, "inserts_per_second": 75.4, "samples_per_second": 19_200.0, "replay_ratio": 255.94,
    "target_ratio": 256.0, "lost": 1_024, "restored": 512, "refused_fragments": 7,
    "malformed_streams": 0, "shards": [{"size": 9_936, "reachable": True}, {"reachable": False}],
}  # fmt: skip


def _status(surreal_home: Path, capsys: pytest.CaptureFixture[str], metrics: dict) -> str:
    exp_dir = make_experiment(surreal_home, "sac1")
    (exp_dir / STATUS_FILE).write_text(json.dumps(metrics))
    code, out, err = surreal(capsys, "status", "sac1")
    assert code == 0, err
    return out


def test_status_says_the_replay(surreal_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _status(surreal_home, capsys, {**METRICS, "replay": REPLAY})
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("replay:"))
    assert lines[at : at + 3] == [
        f"{'replay:':<18}size 19,872 rows; ratio held 255.9 (target 256)",
        f"{'':<18}inserts 75/s, samples 19,200/s; refused 7 fragments; lost 1,024 rows, restored 512",
        f"{'':<18}shard 1 not reachable",
    ]


def test_a_replay_not_measured_yet_shows_dashes(
    surreal_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replay = {**REPLAY, "replay_ratio": None, "shards": [{"reachable": True}]}
    out = _status(surreal_home, capsys, {**METRICS, "replay": replay})
    assert "ratio held - (target 256)\n" in out
    assert "not reachable" not in out


def test_a_run_without_replay_has_no_replay_lines(
    surreal_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "replay:" not in _status(surreal_home, capsys, dict(METRICS))


def test_status_says_the_balance(surreal_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from surreal.runtime.progress import balance

    out = _status(surreal_home, capsys, {**METRICS, "update_share": 0.97, "actor_wait_share": 0.8,
                                         "balance": balance(0.97, 0.8)})  # fmt: skip
    assert (f"{'balance:':<18}the learner updates 97% of the time and the actors wait on it 80% of "
            "theirs: the learner is the cap") in out  # fmt: skip
    no_balance = {**METRICS, "update_share": 0.9}  # a finished run's: its share, and no advice
    (surreal_home / "experiments" / "sac1" / STATUS_FILE).write_text(json.dumps(no_balance))
    code, out, _ = surreal(capsys, "status", "sac1")
    assert code == 0 and "balance:" not in out

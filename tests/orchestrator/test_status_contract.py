"""The status contract is written once (orchestrator/status.py), and the reference section of the
docs says what it says."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

from surreal.orchestrator import status
from surreal.runtime.offpolicy.learner import Learner

DOC = Path(__file__).resolve().parents[2] / "docs" / "getting-started.md"


def _section() -> str:
    text = DOC.read_text()
    return text[text.index("## Status reference") :]


def _names(line_start: str) -> set[str]:
    """The backticked words of the bullet that starts with `line_start`, up to the next bullet."""
    section = _section()
    start = section.index(f"- {line_start}")
    end = section.find("\n- ", start + 1)
    return set(re.findall(r"`([a-z_A-Z]+)`", section[start : end if end > 0 else None]))


def _replay_fields() -> list[str]:
    """The keys an off-policy learner reports under `replay` (its status with two quiet shards)."""
    shards = SimpleNamespace(total=lambda field: 0, status=lambda: [{}, {}])
    learner = SimpleNamespace(shards=shards, _rates=[], cfg=SimpleNamespace(replay_ratio=8.0))
    return list(Learner.replay_status(learner))  # type: ignore[arg-type]


def test_the_doc_lists_every_field_phase_and_state_of_the_contract() -> None:
    assert set(status.IDENTITY_FIELDS) <= _names("Identity")
    assert {p.value for p in status.Phase} == _names("`phase`") - {"phase"}
    assert set(status.METRIC_FIELDS) == _names("The learner's metrics")
    assert set(status.EXTRA_METRICS) == _names("What the learner reports")
    assert set(_replay_fields()) == _names("`replay`") - {"replay"}
    rows = _names("`components`")
    assert set(status.COMPONENT_FIELDS) <= rows
    assert {s.value for s in status.ComponentState} == rows - set(status.COMPONENT_FIELDS) - {
        "components", "ImagePullBackOff"}  # fmt: skip


def test_one_exit_code_per_phase() -> None:
    assert [status.exit_code(p) for p in ("Succeeded", "Stopped", "Failed", None, "Running")] == [
        0,
        130,
        1,
        0,
        0,
    ]
    assert status.exit_code("Nonsense") == 1
    doc = " ".join(_section().split())
    assert "exits 0 for `Succeeded`, 130 for `Stopped`, 1 for `Failed`" in doc


def test_a_status_object_has_the_contracts_fields_in_every_case() -> None:
    spec = {"name": "e", "algo": "ppo", "env": "CartPole-v1", "agents": 2, "steps": 100}
    rows = [status.component("learner", "learner", "Running", 0)]
    out = status.status_object(spec, backend="local", phase="Running", metrics={}, components=rows,
                               problem=None)  # fmt: skip
    assert list(out)[: len(status.IDENTITY_FIELDS) + 1] == [*status.IDENTITY_FIELDS, "phase"]
    assert all(out[k] is None for k in status.METRIC_FIELDS)
    assert "problem" not in out  # what a backend does not know is left out, not null
    assert out["components"] == [{"name": "learner", "role": "learner", "state": "Running", "restarts": 0,
                                  "detail": ""}]  # fmt: skip

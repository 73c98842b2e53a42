"""`surreal status`'s table and JSON for a run whose component failed: the contract's state, and
the backend's detail beside it."""

from __future__ import annotations

import json

from cli_world import STATE, make_experiment, surreal


def test_the_status_table_shows_each_components_detail(tmp_path, monkeypatch, capsys) -> None:
    """A local component's exit is the backend's detail of its state, in the table and the JSON."""
    home = tmp_path / "home"
    exp_dir = make_experiment(home, "alpha")
    problem = "no actor is left to feed the learner: actor-0 failed (exit code 2)"
    state = {**STATE, "phase": "Failed", "problem": problem,
             "components": [*STATE["components"], {"name": "actor-0", "role": "actor", "state": "Failed",
                                                    "restarts": 5, "exit_code": 2}]}  # fmt: skip
    (exp_dir / "state.json").write_text(json.dumps(state))
    monkeypatch.setenv("SURREAL_HOME", str(home))
    code, out, _ = surreal(capsys, "status", "alpha", "-o", "json")
    st = json.loads(out)
    assert code == 0 and st["problem"].startswith("no actor is left")
    assert st["components"][1] == {"name": "actor-0", "role": "actor", "state": "Failed", "restarts": 5,
                                   "detail": "exit code 2"}  # fmt: skip
    code, out, _ = surreal(capsys, "status", "alpha")
    row = next(line for line in out.splitlines() if line.startswith("actor-0"))
    assert row.split() == ["actor-0", "actor", "Failed", "5", "exit", "code", "2"]
    assert "problem:" in out and "no actor is left" in out

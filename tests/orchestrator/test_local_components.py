"""Component and Program: plain, frozen, hashable data that round-trips through JSON."""

import json

import pytest

from surreal.orchestrator.components import Component, FrozenEnv, Program


def _learner(**overrides: object) -> Component:
    fields: dict[str, object] = {
        "name": "learner",
        "role": "learner",
        "argv": ["surreal", "component", "learner"],
        "env": {"SURREAL_TOKEN_FILE": "/x/token", "A": "1"},
        "port": 6000,
    }
    fields.update(overrides)
    return Component(**fields)  # type: ignore[arg-type]


def test_component_is_frozen_and_hashable() -> None:
    c = _learner()
    assert c.argv == ("surreal", "component", "learner")
    assert isinstance(c.env, FrozenEnv) and c.env["A"] == "1"
    assert hash(c) == hash(_learner(env={"A": "1", "SURREAL_TOKEN_FILE": "/x/token"}))
    assert c == _learner(env=(("A", "1"), ("SURREAL_TOKEN_FILE", "/x/token")))
    assert c != _learner(env={"A": "2", "SURREAL_TOKEN_FILE": "/x/token"})
    with pytest.raises(AttributeError):
        c.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        c.env["A"] = "2"  # type: ignore[index]


def test_program_round_trips_through_json() -> None:
    actor = Component("actor-1", "actor", ("python", "-c", "pass"), index=1, cpu=0.5, restart=False)
    program = Program("exp1", (_learner(), actor))
    data = json.loads(json.dumps(program.to_dict()))
    assert data["components"][0]["env"] == {"A": "1", "SURREAL_TOKEN_FILE": "/x/token"}
    assert data["components"][1]["argv"] == ["python", "-c", "pass"]
    restored = Program.from_dict(data)
    assert restored == program
    assert hash(restored) == hash(program)
    assert restored.learner == program.components[0]
    assert restored.component("actor-1").restart is False


@pytest.mark.parametrize(
    "overrides",
    [
        {"name": ""},
        {"name": "a/b"},
        {"argv": ()},
        {"role": ""},
        {"port": 70000},
        {"cpu": 0},
        {"env": {"A": 1}},
    ],
)
def test_component_rejects_bad_fields(overrides: dict[str, object]) -> None:
    with pytest.raises((ValueError, TypeError)):
        _learner(**overrides)


def test_program_rejects_duplicates_and_two_learners() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        Program("exp1", (_learner(), _learner()))
    with pytest.raises(ValueError, match="learner"):
        Program("exp1", (_learner(), _learner(name="learner2")))
    with pytest.raises(ValueError, match="unknown component fields"):
        Component.from_dict({**_learner().to_dict(), "gpu": 1})

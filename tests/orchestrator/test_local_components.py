"""Component and Program: plain, frozen, hashable data that round-trips through JSON."""

import json

import pytest

from surreal.orchestrator.program import Component, FrozenEnv, Program, duplicate_names


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
    assert restored.component("learner") == program.components[0]
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


def _actor(name: str, index: int = 0) -> Component:
    return Component(name, "actor", ("surreal", "component", "actor"), index=index)


def test_duplicate_names_are_refused_each_named_once_and_sorted() -> None:
    actors = [_actor(f"actor-{i}", i) for i in range(5)]
    with pytest.raises(ValueError, match=r"^duplicate component names: \['actor-1', 'actor-3'\]$"):
        Program("exp1", (_learner(), *actors, actors[3], actors[1], actors[3]))
    assert duplicate_names(["b", "a", "b", "c", "a", "b"]) == ["a", "b"]
    assert duplicate_names(f"actor-{i}" for i in range(1000)) == []


class _CountedName(str):
    """A component name that counts how often it is compared and hashed."""

    compared = 0
    hashed = 0

    def __eq__(self, other: object) -> bool:
        _CountedName.compared += 1
        return str.__eq__(self, other)

    def __hash__(self) -> int:
        _CountedName.hashed += 1
        return str.__hash__(self)


def test_the_duplicate_check_looks_at_each_name_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """What makes a program of 100,000 actors take seconds and not minutes: names go through a set
    (one hash each, no comparison between distinct names). Counting every name against every other
    (names.count) made N * (N - 1) comparisons; here that would be 4 million."""
    n = 2000
    actors = [_actor(_CountedName(f"actor-{i}"), i) for i in range(n)]
    monkeypatch.setattr(_CountedName, "compared", 0)
    monkeypatch.setattr(_CountedName, "hashed", 0)
    program = Program("exp1", actors)
    assert len(program.group("actor")) == n
    assert _CountedName.hashed <= 2 * n
    assert _CountedName.compared == 0  # distinct names never meet in the set
    with pytest.raises(ValueError, match=r"duplicate component names: \['actor-7'\]"):
        Program("exp1", (*actors, _actor(_CountedName("actor-7"), 7)))
    assert _CountedName.compared <= 2  # the one duplicate, found by its hash


def test_learner_ports_are_below_the_ephemeral_range() -> None:
    """A port the kernel hands out is any outgoing connection's source port too: between create and
    the learner's bind another process took one once (CI: "Address already in use", a rank group
    restarted). Ports are drawn below the range, where only a bind to them takes them."""
    from surreal.orchestrator.local.experiment import LOW_PORT, free_ports

    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral = int(f.read().split()[0])
    ports = free_ports(8)
    assert len(set(ports)) == 8 and all(LOW_PORT <= p < ephemeral for p in ports), ports

"""A program as plain data: the components of one experiment, ready for any launcher.

`make_program(spec)` builds a `Program`; a launcher (local supervisor, Kubernetes renderer) runs it.
Everything here is frozen, hashable and round-trips through JSON, so a detached supervisor can
load the exact program the CLI built from `exp_dir/program.json`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

# Component names become file names (logs/<name>.log) and Kubernetes name parts.
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

LEARNER_ROLE = "learner"
ACTOR_ROLE = "actor"
EVALUATOR_ROLE = "evaluator"


class FrozenEnv(Mapping[str, str]):
    """An immutable, hashable str -> str mapping (environment variables of a component)."""

    __slots__ = ("_data", "_key")

    def __init__(self, items: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> None:
        data = dict(items)
        for key, value in data.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"environment entries must be str -> str, got {key!r}: {value!r}")
        self._data = data
        self._key = tuple(sorted(data.items()))

    def __getitem__(self, key: str) -> str:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __eq__(self, other: object) -> bool:
        # Two FrozenEnvs compare their dicts directly (Mapping's __eq__ would copy both first):
        # render compares every actor's env with the first one's.
        if isinstance(other, FrozenEnv):
            return self._data == other._data
        return super().__eq__(other)

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        return f"FrozenEnv({dict(self._key)!r})"


@dataclass(frozen=True)
class Component:
    """One process of an experiment, described independently of the backend that runs it."""

    # Unique within the program; used for log file names and `surreal logs NAME COMPONENT`.
    name: str
    # What it does: "learner", "actor", "evaluator", "tensorboard", ... The local supervisor treats
    # "learner" specially: its clean exit (code 0) ends the experiment as Succeeded.
    role: str
    # Full command line; argv[0] is resolved through PATH. Any sequence is stored as a tuple.
    argv: tuple[str, ...]
    # Extra environment variables, layered over the launcher's own environment.
    env: Mapping[str, str] = field(default_factory=FrozenEnv)
    # Restart the process when it crashes (non-zero exit or killed by a signal).
    restart: bool = True
    # Worker index among components of the same role (actor 0, 1, ...).
    index: int = 0
    # CPU cores requested (Kubernetes requests/limits; informational locally).
    cpu: float = 1.0
    # Memory requested, in MiB (Kubernetes requests/limits; informational locally).
    memory_mb: int = 512
    # TCP port the component listens on, if any (a Service port on Kubernetes).
    port: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "argv", tuple(self.argv))
        object.__setattr__(self, "env", FrozenEnv(self.env))
        if not _NAME_RE.match(self.name):
            raise ValueError(f"invalid component name {self.name!r} (letters, digits, '_.-')")
        if not self.role:
            raise ValueError(f"component {self.name!r} has an empty role")
        if not self.argv or not all(isinstance(a, str) for a in self.argv):
            raise ValueError(f"component {self.name!r} needs a non-empty argv of strings")
        if self.index < 0 or self.cpu <= 0 or self.memory_mb <= 0:
            raise ValueError(f"component {self.name!r}: index >= 0, cpu > 0, memory_mb > 0")
        if self.port is not None and not 0 < self.port < 65536:
            raise ValueError(f"component {self.name!r}: port {self.port} out of range")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict; `Component.from_dict` inverts it."""
        return {
            "name": self.name,
            "role": self.role,
            "argv": list(self.argv),
            "env": dict(sorted(self.env.items())),
            "restart": self.restart,
            "index": self.index,
            "cpu": self.cpu,
            "memory_mb": self.memory_mb,
            "port": self.port,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Component:
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown component fields: {sorted(unknown)}")
        return cls(**data)


def duplicate_names(names: Iterable[str]) -> list[str]:
    """The names that occur more than once, sorted; one pass with a set (linear, whatever the count)."""
    seen: set[str] = set()
    duplicates: set[str] = set()
    for name in names:
        if name in seen:
            duplicates.add(name)
        else:
            seen.add(name)
    return sorted(duplicates)


@dataclass(frozen=True)
class Program:
    """Every component of one experiment."""

    # Experiment name (a valid Kubernetes name; checked by the spec layer).
    experiment: str
    # The components, in start order.
    components: tuple[Component, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "components", tuple(self.components))
        duplicates = duplicate_names(c.name for c in self.components)
        if duplicates:
            raise ValueError(f"duplicate component names: {duplicates}")
        if sum(c.role == LEARNER_ROLE for c in self.components) > 1:
            raise ValueError("a program has at most one learner")

    @property
    def learner(self) -> Component | None:
        return next((c for c in self.components if c.role == LEARNER_ROLE), None)

    def group(self, role: str) -> list[Component]:
        """The components of one role (a role group: actor workers, ...), by index."""
        return sorted((c for c in self.components if c.role == role), key=lambda c: c.index)

    @property
    def roles(self) -> dict[str, int]:
        """Each role of the program and how many components it has, in start order."""
        out: dict[str, int] = {}
        for c in self.components:
            out[c.role] = out.get(c.role, 0) + 1
        return out

    def component(self, name: str) -> Component:
        for c in self.components:
            if c.name == name:
                return c
        raise KeyError(f"no component named {name!r} in {self.experiment!r}")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict; `Program.from_dict` inverts it."""
        return {
            "experiment": self.experiment,
            "components": [c.to_dict() for c in self.components],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Program:
        return cls(
            experiment=data["experiment"],
            components=tuple(Component.from_dict(c) for c in data["components"]),
        )

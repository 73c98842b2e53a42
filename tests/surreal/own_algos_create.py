"""Algorithms with a bug surreal can see at create: each is refused there in one line naming
`own_algos_create:NAME`, the hook or attribute and the problem, exit 2, nothing created
(tests/surreal/test_own_algorithm.py). Imported in the test process: nothing here runs at import."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from surreal.algorithms.api import OffPolicy, OffPolicyConfig, OnPolicy, OnPolicyConfig
from surreal.algorithms.sac import SAC


def _update(self: Any, *args: Any) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class MyConfig(OnPolicyConfig):
    ent_coef: float = 0.0


class Fine(OnPolicy):
    """What every case below breaks one thing of."""

    name = "fine"
    Config = MyConfig
    update = _update


class NoUpdate(OnPolicy):
    name = "no_update"


class UpdateNotAFunction(Fine):
    update = 3  # type: ignore[assignment]


class NoMake(OffPolicy):
    name = "no_make"
    update = _update


class NoActor(Fine):
    roles = ("learner", "evaluator")


class OnPolicyReplay(Fine):
    roles = ("learner", "actor", "replay", "evaluator")


class RolesAString(Fine):
    roles = "learner"  # type: ignore[assignment]


class OffPolicyOnConfig(OffPolicy):
    name = "off_on"
    Config = MyConfig  # type: ignore[assignment]
    make = update = _update


class SACOnConfig(SAC):
    Config = MyConfig  # type: ignore[assignment]


class OnPolicyOffConfig(Fine):
    Config = OffPolicyConfig  # type: ignore[assignment]


class PresetRaises(Fine):
    def preset(self, env: Any, agents: int, resolved: Any = None) -> Any:
        raise RuntimeError("no preset today")


class PresetADict(Fine):
    def preset(self, env: Any, agents: int, resolved: Any = None) -> Any:
        return {"learning_rate": 1e-3}


class PresetTheBase(Fine):
    def preset(self, env: Any, agents: int, resolved: Any = None) -> Any:
        return OnPolicyConfig()  # the family's config, not this algorithm's


@dataclass(frozen=True)
class ComplexPresetConfig(MyConfig):
    phase: Any = 0.0


class PresetComplex(Fine):
    Config = ComplexPresetConfig

    def preset(self, env: Any, agents: int, resolved: Any = None) -> Any:
        return ComplexPresetConfig(phase=1j)


@dataclass(frozen=True)
class MissingBoundConfig(MyConfig):
    BOUNDS = {**OnPolicyConfig.BOUNDS, "ent_coeff": (0.0, 1.0)}  # a typo of ent_coef


class BoundsMissingField(Fine):
    Config = MissingBoundConfig


@dataclass(frozen=True)
class ListBoundsConfig(MyConfig):
    BOUNDS = [("ent_coef", (0.0, 1.0))]  # type: ignore[assignment]


class BoundsAList(Fine):
    Config = ListBoundsConfig


@dataclass(frozen=True)
class BadPairConfig(MyConfig):
    BOUNDS = {**OnPolicyConfig.BOUNDS, "ent_coef": (0.0,)}


class BoundsNotAPair(Fine):
    Config = BadPairConfig


@dataclass(frozen=True)
class ComplexConfig(MyConfig):
    phase: complex = 1j


class ComplexDefault(Fine):
    Config = ComplexConfig


@dataclass(frozen=True)
class ObjectConfig(MyConfig):
    thing: object = field(default_factory=object)


class ObjectDefault(Fine):
    Config = ObjectConfig


@dataclass(frozen=True)
class RaisingConfig(MyConfig):
    def __post_init__(self) -> None:
        raise KeyError("lr")


class ConfigRaises(Fine):
    Config = RaisingConfig


@dataclass(frozen=True)
class BrokenValidateConfig(MyConfig):
    def validate(self) -> None:
        raise TypeError("validate is broken")


class ValidateRaises(Fine):
    Config = BrokenValidateConfig


class DefaultStepsRaises(Fine):
    def default_steps(self, env: Any, agents: int, resolved: Any = None) -> int:
        raise ZeroDivisionError("division by zero")

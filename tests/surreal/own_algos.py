"""Things a researcher's module may hold under the name `--algo MODULE:NAME` gives: the CLI must
refuse all but an algorithm in one line (tests/surreal/test_own_algorithm.py)."""

from __future__ import annotations

from dataclasses import dataclass

from surreal.algorithms.api import OnPolicy

NOT_AN_ALGORITHM = 42


@dataclass(frozen=True)
class PlainConfig:
    lr: float = 1e-3


class WrongConfig(OnPolicy):
    name = "wrong"
    Config = PlainConfig  # type: ignore[assignment]

    def update(self, *args: object) -> dict[str, float]:
        return {}


class Exploding(OnPolicy):
    name = "exploding"

    def __init__(self) -> None:
        raise RuntimeError("not today")

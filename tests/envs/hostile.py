"""Environments that each break, in one way, what surreal expects of an environment.

A user's own environment module (`--env hostile:NAME` with `tests/envs` on PYTHONPATH). `Plain` is a
valid environment (a float32 Box (4,) of observations, a Box (2,) of actions in [-1, 1]); each other
class changes one thing of it. Those above `Flaky` are what `surreal create` refuses in one line
(its probe builds one, resets it and steps it once); `Flaky` passes that probe and fails later:
from its `after`-th step on (counted over its life, across resets) it raises (`fail="raise"`) or
gives NaN observations (`fail="nan"`).
"""

from __future__ import annotations

import sys
from typing import Any

import gymnasium as gym
import numpy as np

BOX = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)


class Plain(gym.Env[np.ndarray, np.ndarray]):
    observation_space: Any = BOX
    action_space: Any = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def obs(self) -> Any:
        return np.zeros(4, np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        return self.obs(), {}

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        return self.obs(), 0.0, False, False, {}


class InfiniteActions(Plain):
    action_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)


class EmptyObservations(Plain):
    observation_space = gym.spaces.Box(-1.0, 1.0, (0,), np.float32)

    def obs(self) -> Any:
        return np.zeros(0, np.float32)


class ResetShape(Plain):
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        return np.zeros(3, np.float32), {}


class StepShape(Plain):
    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        return np.zeros(5, np.float32), 0.0, False, False, {}


class NaNReset(Plain):
    def obs(self) -> Any:
        return np.full(4, np.nan, np.float32)


class InfiniteReward(Plain):
    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        return self.obs(), float("inf"), False, False, {}


class DictMissingKey(Plain):
    observation_space = gym.spaces.Dict({"pos": BOX, "cell": gym.spaces.Discrete(3)})

    def obs(self) -> Any:
        return {"pos": np.zeros(4, np.float32)}


class NoActionSpace(gym.Env[np.ndarray, np.ndarray]):
    observation_space = BOX

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        return np.zeros(4, np.float32), {}


class TupleActions(Plain):
    action_space = (-1.0, 1.0)  # not a gymnasium space


class RaisesInReset(Plain):
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        raise RuntimeError("no licence")


class RaisesInStep(Plain):
    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        raise ValueError("boom")


class ExitsInConstructor(Plain):
    def __init__(self) -> None:
        sys.exit(3)


class Float64Observations(Plain):
    """Accepted: float64 values in a float32 Box become float32 in the batch."""

    def obs(self) -> Any:
        return np.ones((2, 2), np.float64)  # (2, 2) values of a Box (4,): raveled, as the batch does


class Flaky(Plain):
    def __init__(self, after: int = 2, fail: str = "raise") -> None:
        self.after, self.fail, self.steps = after, fail, 0

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        self.steps += 1
        if self.steps < self.after:
            return self.obs(), 1.0, False, self.steps % 10 == 0, {}
        if self.fail == "raise":
            raise ValueError(f"boom at step {self.steps}")
        return np.full(4, np.nan, np.float32), 0.0, False, False, {}

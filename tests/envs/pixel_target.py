"""PixelTarget-v0: a pixel task only a policy that looks at *where* something is can solve.

A user's own environment module (import it with `tests/envs` on PYTHONPATH, e.g.
`--env pixel_target:PixelTarget-v0` or `--env pixel_target:PixelTarget`), for learning tests of the
CNN policy bounded by env steps. Each step shows a bright square somewhere in one of the image's four
quadrants; the right action is that quadrant (0 top-left, 1 top-right, 2 bottom-left, 3 bottom-right)
and earns +1, any other action 0. The square then jumps to a new random place, so every step is a
fresh question and the answer is in the pixels alone.

An episode is `episode_length` (16) steps, cut as truncated (a time limit: the task itself never
ends, so a value function bootstraps through it). Expected returns: a random policy 4.0 (a quarter of
the maximum), the optimal one 16.0.

Observations are uint8 (1, size, size), channels first, 0 background and 255 square; `size` (16)
below 36 gets surreal's small CNN trunk, `size=36` or more the Nature-DQN one.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

ENV_ID = "PixelTarget-v0"


class PixelTarget(gym.Env[np.ndarray, np.int64]):
    """A bright square in one of four quadrants; reward 1 for naming the quadrant."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, size: int = 16, episode_length: int = 16) -> None:
        if size < 4 or size % 2:
            raise ValueError(f"size must be an even number >= 4, got {size}")
        if episode_length < 1:
            raise ValueError(f"episode_length must be >= 1, got {episode_length}")
        self.size = size
        self.episode_length = episode_length
        self.block = size // 4  # the square's side: half a quadrant, so it can sit anywhere inside one
        self.observation_space = gym.spaces.Box(0, 255, (1, size, size), np.uint8)
        self.action_space = gym.spaces.Discrete(4)
        self._quadrant = 0
        self._t = 0

    def _place(self) -> np.ndarray:
        """Put the square at a random place in a random quadrant; return a fresh observation."""
        half = self.size // 2
        self._quadrant = int(self.np_random.integers(4))
        top = (self._quadrant // 2) * half + int(self.np_random.integers(half - self.block + 1))
        left = (self._quadrant % 2) * half + int(self.np_random.integers(half - self.block + 1))
        obs = np.zeros((1, self.size, self.size), np.uint8)
        obs[0, top : top + self.block, left : left + self.block] = 255
        return obs

    @property
    def quadrant(self) -> int:
        """The right action for the current observation (what the optimal policy plays)."""
        return self._quadrant

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        return self._place(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(action):
            raise ValueError(f"invalid action {action!r} for {self.action_space}")
        reward = 1.0 if int(action) == self._quadrant else 0.0
        self._t += 1
        return self._place(), reward, False, self._t >= self.episode_length, {}


if ENV_ID not in gym.registry:  # importing under a second module name must not re-register
    gym.register(ENV_ID, entry_point=f"{__name__}:PixelTarget")

"""CueWorld-v0: a Dict observation of every leaf kind, where only the discrete leaf matters.

A user's own environment module (`--env cue_world:CueWorld-v0` with `tests/envs` on PYTHONPATH).
Each step shows a cue in 0..3 and pays 1 when the action names it; an episode is `length` (8)
steps, cut by a time limit (truncated). The observation is a Dict of

- "cue": Discrete(4, start=10): the cue plus 10 (a `start` the policy must see past);
- "frame": uint8 Box (6, 6, 3), channels last: noise, except a bright row at the cue's index;
- "noise": float32 Box (3,): Gaussian noise with mean 5 and std 2 (what normalization is for);
- "bits": MultiBinary(2): random bits;
- "note": Text (what no network encodes: refused unless obs_keys leaves it out).

So a policy learns only if the discrete leaf (one-hot) or the image leaf (its CNN) reaches its
head. Returns: a uniformly random policy 2.0 in expectation, the optimal one 8.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

ENV_ID = "CueWorld-v0"
START = 10


class CueWorld(gym.Env[dict[str, Any], np.int64]):
    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, length: int = 8, note: bool = True) -> None:
        self.length = length
        spaces: dict[str, gym.Space] = {
            "cue": gym.spaces.Discrete(4, start=START),
            "frame": gym.spaces.Box(0, 255, (6, 6, 3), np.uint8),
            "noise": gym.spaces.Box(-np.inf, np.inf, (3,), np.float32),
            "bits": gym.spaces.MultiBinary(2),
        }
        if note:
            spaces["note"] = gym.spaces.Text(8)
        self.observation_space = gym.spaces.Dict(spaces)
        self.action_space = gym.spaces.Discrete(4)
        self._cue, self._t, self._note = 0, 0, note

    def _obs(self) -> dict[str, Any]:
        rng = self.np_random
        self._cue = int(rng.integers(0, 4))
        frame = rng.integers(0, 60, (6, 6, 3), dtype=np.uint8)
        frame[self._cue] = 255
        obs: dict[str, Any] = {
            "cue": self._cue + START,
            "frame": frame,
            "noise": rng.normal(5.0, 2.0, 3).astype(np.float32),
            "bits": rng.integers(0, 2, 2, dtype=np.int8),
        }
        if self._note:
            obs["note"] = "cue"
        return obs

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        reward = float(int(action) == self._cue)
        self._t += 1
        return self._obs(), reward, False, self._t >= self.length, {}


if ENV_ID not in gym.registry:  # importing under a second module name must not re-register
    gym.register(ENV_ID, entry_point=f"{__name__}:CueWorld")

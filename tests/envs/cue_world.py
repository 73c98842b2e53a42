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

With `obs="box"` the observation is the cue alone, one-hot in a Box (4,). With `actions="tuple"`
the action is a leaf of every kind too (`ACTION_SPACE`): a Tuple of

- Discrete(4, start=1): pays 1 when it names the cue (plus 1);
- a Dict of "dial", MultiDiscrete([4, 2]): 0.5 when its first entry names the cue, 0.5 when its
  second is the cue's parity; and "flags", MultiBinary(2): 0.5 for each bit of the cue it matches;
- Box(-1, 1, (2, 2)): 1 - mean((a - target)^2), at least 0, where target is 0.5 everywhere for an
  odd cue and -0.5 for an even one.

A step pays at most 4 (an episode 32); a uniformly random action ~1.6 a step (~13; measured:
`python tests/envs/cue_world.py`).

With `actions="box"` the action is a Box(-1, 1, (4,)) (what SAC takes), paying
(a[cue] - mean of the other three + 2) / 4 in [0, 1]: any policy blind to the cue, random or
not, expects 0.5 a step (4 an episode), the optimal one (+1 at the cue, -1 elsewhere) 1 (8).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

ENV_ID = "CueWorld-v0"
START = 10


class CueWorld(gym.Env[dict[str, Any], np.int64]):
    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self, length: int = 8, note: bool = True, actions: str = "discrete", obs: str = "dict"
    ) -> None:
        if actions not in ("discrete", "tuple", "box") or obs not in ("dict", "box"):
            raise ValueError(f"actions must be 'discrete', 'tuple' or 'box' and obs 'dict' or 'box', "
                             f"got {actions!r}, {obs!r}")  # fmt: skip
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
        if obs == "box":  # the cue alone, one-hot (what ES's networks take)
            self.observation_space = gym.spaces.Box(0.0, 1.0, (4,), np.float32)
        self.action_space = {"discrete": gym.spaces.Discrete(4), "tuple": ACTION_SPACE, "box": BOX}[actions]
        self._cue, self._t, self._note, self._box = 0, 0, note, obs == "box"

    def _obs(self) -> Any:
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
        return np.eye(4, dtype=np.float32)[self._cue] if self._box else obs

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(action):
            raise ValueError(f"{action!r} is not an action of {self.action_space}")
        if isinstance(action, int | np.integer):
            reward = float(int(action) == self._cue)
        elif isinstance(action, np.ndarray):
            reward = box_pays(self._cue, action)
        else:
            reward = pays(self._cue, action)
        self._t += 1
        return self._obs(), reward, False, self._t >= self.length, {}


ACTION_SPACE = gym.spaces.Tuple(
    (
        gym.spaces.Discrete(4, start=1),
        gym.spaces.Dict({"dial": gym.spaces.MultiDiscrete([4, 2]), "flags": gym.spaces.MultiBinary(2)}),
        gym.spaces.Box(-1.0, 1.0, (2, 2), np.float32),
    )
)


BOX = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)


def box_pays(cue: int, action: np.ndarray) -> float:
    """The reward of a Box action for `cue`: in [0, 1], 0.5 for any blind policy."""
    others = np.delete(np.asarray(action, np.float64), cue)
    return float((action[cue] - others.mean() + 2.0) / 4.0)


def pays(cue: int, action: tuple[Any, ...]) -> float:
    """The reward of a Tuple action for `cue` (the module's docstring)."""
    pick, parts, push = action
    reward = float(int(pick) - 1 == cue)
    reward += 0.5 * (int(parts["dial"][0]) == cue) + 0.5 * (int(parts["dial"][1]) == cue % 2)
    reward += 0.5 * (int(parts["flags"][0]) == cue & 1) + 0.5 * (int(parts["flags"][1]) == (cue >> 1) & 1)
    target = 0.5 if cue % 2 else -0.5
    return reward + max(0.0, 1.0 - float(np.mean((np.asarray(push) - target) ** 2)))


if ENV_ID not in gym.registry:  # importing under a second module name must not re-register
    gym.register(ENV_ID, entry_point=f"{__name__}:CueWorld")


if __name__ == "__main__":  # a uniformly random Tuple action's mean episode return
    env = CueWorld(actions="tuple")
    env.reset(seed=0)
    env.action_space.seed(0)
    total = sum(env.step(env.action_space.sample())[1] for _ in range(80_000))
    print(f"random: {total / 10_000:.2f} per episode of 8 steps")

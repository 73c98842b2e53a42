"""The actor-critic for image observations: a CNN trunk shared by the policy and value heads.

CleanRL's `ppo_atari` agent: the Nature-DQN trunk (Mnih et al. 2015: 32 8x8/4, 64 4x4/2, 64 3x3/1,
512 units), orthogonal init with gain sqrt(2), a 0.01 policy head and a 1.0 value head, on uint8
frames scaled by 1/255 inside the network (so they travel as uint8 and are never normalized).
Images smaller than the Nature trunk's 36-pixel minimum get a small trunk (two 3x3 convolutions).

Actors run its head too (`CNNHead`): a CNN is not worth rewriting in numpy, and torch's
convolutions are what make pixels affordable on a CPU. The sampling is policy.py's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

from surreal.runtime.config import FEATURES
from surreal.runtime.envs.make import EnvSpaces
from surreal.runtime.envs.obs_leaves import image_slice
from surreal.runtime.onpolicy.networks import TrunkActorCritic, init_layer, mlp
from surreal.runtime.onpolicy.policy import policy_layers

NATURE_MIN_SIZE = 36  # the smallest height and width the Nature trunk's strides leave a pixel of


def cnn_trunk(image_shape: tuple[int, int, int], ortho: bool = True) -> nn.Sequential:
    """Images [B, C, H, W] (already scaled to [0, 1]) -> features [B, 512]."""
    c, h, w = image_shape
    g = math.sqrt(2)
    if min(h, w) >= NATURE_MIN_SIZE:
        convs: list[nn.Module] = [
            init_layer(nn.Conv2d(c, 32, 8, stride=4), g, ortho), nn.ReLU(),
            init_layer(nn.Conv2d(32, 64, 4, stride=2), g, ortho), nn.ReLU(),
            init_layer(nn.Conv2d(64, 64, 3, stride=1), g, ortho), nn.ReLU(),
        ]  # fmt: skip
    else:
        convs = [
            init_layer(nn.Conv2d(c, 16, 3, stride=1, padding=1), g, ortho), nn.ReLU(),
            init_layer(nn.Conv2d(16, 32, 3, stride=2, padding=1), g, ortho), nn.ReLU(),
        ]  # fmt: skip
    with torch.no_grad():
        flat = nn.Sequential(*convs, nn.Flatten())(torch.zeros(1, c, h, w)).shape[1]
    return nn.Sequential(*convs, nn.Flatten(), init_layer(nn.Linear(flat, FEATURES), g, ortho), nn.ReLU())


class CNNActorCritic(TrunkActorCritic):
    """Categorical (or diagonal Gaussian) policy and a value on a shared CNN trunk.

    state_dict keys: `trunk.*`, `policy.weight/bias`, `critic.weight/bias` (and `log_std`).
    """

    def __init__(self, spaces: EnvSpaces, log_std_init: float = 0.0, ortho_init: bool = True) -> None:
        super().__init__()
        if spaces.image_shape is None:
            raise ValueError("CNNActorCritic needs image observations")
        self.trunk = cnn_trunk(spaces.image_shape, ortho_init)
        self.policy = init_layer(nn.Linear(FEATURES, spaces.head_dim), 0.01, ortho_init)
        self.critic = init_layer(nn.Linear(FEATURES, 1), 1.0, ortho_init)
        self.set_actions(spaces, log_std_init)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """uint8 images -> trunk features; the scaling to [0, 1] happens here, on the device."""
        return self.trunk(obs.float().mul_(1.0 / 255.0))  # type: ignore[no-any-return]


class MixedActorCritic(TrunkActorCritic):
    """Observations of several leaves with an image among them (obs_leaves.py; MiniGrid's image
    and direction): the image through the CNN trunk, the other leaves' packed columns beside its
    features, then separate policy and value MLPs on the two joined (Stable-Baselines3's
    MultiInputPolicy: CombinedExtractor, then its MLPs). Input: packed float32 rows, the image's
    columns holding its raw 0-255 values.

    state_dict keys: `trunk.*`, `policy.<i>.*`, `critic.<i>.*` (and `log_std`)."""

    def __init__(
        self,
        spaces: EnvSpaces,
        hidden_sizes: tuple[int, ...] = (64, 64),
        activation: str = "tanh",
        log_std_init: float = 0.0,
        ortho_init: bool = True,
    ) -> None:
        super().__init__()
        found = image_slice(spaces.obs_leaves)
        if found is None:
            raise ValueError("MixedActorCritic needs an image leaf")
        self.image_at, leaf = found
        self.image_shape = (leaf.shape[0], leaf.shape[1], leaf.shape[2])
        self.image_size = leaf.width
        self.trunk = cnn_trunk(self.image_shape, ortho_init)
        joined = FEATURES + spaces.obs_dim - self.image_size
        self.policy = mlp(joined, hidden_sizes, spaces.head_dim, activation, 0.01, ortho_init)
        self.critic = mlp(joined, hidden_sizes, 1, activation, 1.0, ortho_init)
        self.set_actions(spaces, log_std_init)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """Packed rows -> the image's trunk features beside the other leaves' columns."""
        a, b = self.image_at, self.image_at + self.image_size
        image = obs[:, a:b].reshape(-1, *self.image_shape).mul(1.0 / 255.0)
        return torch.cat([self.trunk(image), obs[:, :a], obs[:, b:]], dim=1)


class CNNHead:
    """The policy head's output for a batch of uint8 images (or packed rows holding one: the mixed
    network), from published weights, on the CPU in the actor's own process (one torch thread: the
    actor's core steps the environments too)."""

    def __init__(
        self, weights: Mapping[str, np.ndarray], spaces: EnvSpaces, activation: str = "tanh"
    ) -> None:
        torch.set_num_threads(1)
        self.net: CNNActorCritic | MixedActorCritic
        if spaces.structured:
            hidden = tuple(w.shape[0] for w, _ in policy_layers(weights)[:-1])  # all but the output's
            self.net = MixedActorCritic(spaces, hidden, activation, ortho_init=False)
        else:
            self.net = CNNActorCritic(spaces, ortho_init=False)
        # Decoded weights are read-only views of the message; load_state_dict copies them anyway.
        state = {k: torch.tensor(np.asarray(v, np.float32)) for k, v in weights.items()}
        try:
            self.net.load_state_dict(state)
        except RuntimeError as exc:  # names or shapes that are not this network's
            shape = spaces.image_shape or image_slice(spaces.obs_leaves)
            raise ValueError(f"the parameters do not fit the CNN policy for {shape}: "
                             f"{str(exc).splitlines()[0]}") from None  # fmt: skip
        self.net.eval()

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return self.net.head(torch.from_numpy(np.ascontiguousarray(obs))).numpy()

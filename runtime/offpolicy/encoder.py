"""The observation encoder an off-policy algorithm puts first in each of its networks: packed
float32 rows (obs.py) -> features. Vectors, one-hot discrete entries and binary ones pass as
they are; an image goes through a CNN (cnn.py's trunk: Nature-DQN, or the small one below 36
pixels) on its 0-255 values scaled by 1/255, its features beside the other columns. So SAC on
pixels is Stable-Baselines3's SAC with CnnPolicy/MultiInputPolicy: each network its own
encoder (share_features_extractor=False), the critic's trained by the critic's loss, the actor's
by the actor's. The actor role runs the policy's encoder from the published weights
(`PolicyEncoder`; torch only for images)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

from surreal.runtime.envs.make import EnvSpaces
from surreal.runtime.envs.obs_leaves import image_slice
from surreal.runtime.offpolicy.obs import leaves

PREFIX = "encoder."  # its weights' names in a network that holds it as `encoder`


class Encoder(nn.Module):
    """[B, obs_dim] packed rows -> [B, out_dim] features."""

    def __init__(self, sp: EnvSpaces) -> None:
        super().__init__()
        found = image_slice(leaves(sp))
        self.trunk: nn.Module | None = None
        self.out_dim = sp.obs_dim
        if found is not None:
            from surreal.runtime.config import FEATURES
            from surreal.runtime.onpolicy.cnn import cnn_trunk

            self.image_at, leaf = found
            self.image_shape = (leaf.shape[0], leaf.shape[1], leaf.shape[2])
            self.image_size = leaf.width
            self.trunk = cnn_trunk(self.image_shape)
            self.out_dim = FEATURES + sp.obs_dim - self.image_size

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.trunk is None:
            return obs
        a, b = self.image_at, self.image_at + self.image_size
        image = obs[:, a:b].reshape(-1, *self.image_shape).mul(1.0 / 255.0)
        return torch.cat([self.trunk(image), obs[:, :a], obs[:, b:]], dim=1)


class PolicyEncoder:
    """The policy network's encoder from its published weights (`encoder.*`), on the CPU with one
    torch thread (an actor's core steps its environments too): packed rows -> features."""

    def __init__(self, weights: Mapping[str, np.ndarray], sp: EnvSpaces) -> None:
        torch.set_num_threads(1)
        self.net = Encoder(sp)
        state = {k[len(PREFIX) :]: torch.tensor(np.asarray(v, np.float32)) for k, v in weights.items()
                 if k.startswith(PREFIX)}  # fmt: skip
        try:
            self.net.load_state_dict(state)
        except RuntimeError as exc:
            raise ValueError(f"the policy's encoder weights do not fit the observations: "
                             f"{str(exc).splitlines()[0]}") from None  # fmt: skip
        self.net.eval()

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return self.net(torch.from_numpy(np.ascontiguousarray(obs, np.float32))).numpy()

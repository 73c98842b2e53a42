"""MLP forward passes in numpy, for the roles that only run a policy (actors and evaluators).

They never import torch: on a batch of 16 observations a numpy forward costs about a third of
torch's (per-op dispatch dominates at that size), and a process without torch starts faster and
holds a few hundred MB less, which counts when a cluster runs hundreds of actor pods.
"""

from __future__ import annotations

import numpy as np

Layers = list[tuple[np.ndarray, np.ndarray]]  # (weights [..., out, in], biases [..., out])

ACTIVATIONS = ("tanh", "relu")


def forward(layers: Layers, x: np.ndarray, activation: str) -> np.ndarray:
    """Outputs [N, out] for inputs [N, in], with `activation` after every layer but the last.

    Weights are 2-D [out, in] (one network for every row) or 3-D [N, out, in] (one per row).
    """
    last = len(layers) - 1
    for k, (w, b) in enumerate(layers):
        x = x @ w.T + b if w.ndim == 2 else np.matmul(w, x[:, :, None])[:, :, 0] + b
        if k < last:
            x = np.tanh(x) if activation == "tanh" else np.maximum(x, 0.0)
    return x

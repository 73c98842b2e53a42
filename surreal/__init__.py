"""surreal: a Kubernetes-native, layered stack for distributed deep reinforcement learning."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from surreal.orchestrator.trained import TrainedPolicy

__version__ = "0.1.0"


def load_policy(where: str | os.PathLike[str], *, home: Path | None = None, seed: int = 0) -> TrainedPolicy:
    """The policy a run trained, from its latest checkpoint: `where` is an experiment's name (in
    $SURREAL_HOME, or `home`), its folder, or a checkpoint file in it. `.act(obs)` takes one raw
    observation or a batch and returns the actions, with the normalization it was trained with:

        policy = surreal.load_policy("demo")
        env = policy.make_env()
        obs, _ = env.reset()
        obs, reward, terminated, truncated, _ = env.step(policy.act(obs))

    (orchestrator/trained.py; imported here only when called, so `import surreal` stays light.)"""
    from surreal.orchestrator.trained import load_policy as load

    return load(where, home=home, seed=seed)

"""TensorBoard scalars, keyed by env steps so restarted learners continue the same curves."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


class Scalars:
    """A thin SummaryWriter wrapper: one call per group of scalars; flushes on its own timer."""

    def __init__(self, log_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter  # heavy import; learner only

        log_dir.mkdir(parents=True, exist_ok=True)
        self._writer = SummaryWriter(log_dir=str(log_dir), flush_secs=10)

    def add(self, group: str, values: Mapping[str, float], step: int) -> None:
        for name, value in values.items():
            self._writer.add_scalar(f"{group}/{name}", value, step)

    def close(self) -> None:
        self._writer.flush()
        self._writer.close()

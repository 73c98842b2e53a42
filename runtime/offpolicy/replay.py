"""A replay shard's contents and the rate limiter that holds its replay ratio (no networking, no
torch: the replay role, replay_role.py, serves them; tests drive them directly).

`Rows` is a ring of transitions, one numpy array per field, sampled uniformly. `RatioLimiter` is
Reverb's SampleToInsertRatio: the rows sampled per row inserted are held at `ratio` within
`error_buffer` rows, once `min_size` rows are in. An insert that would take the learner too far
behind waits; a sample that would train too far ahead of the actors waits.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

# Written into the experiment's folder by a launcher that deletes it, before it stops anything: a
# shard stopped then keeps nothing for a replacement that will never start (its rows, gigabytes
# for images, would only delay the deletion or fill a disk).
DELETING_FILE = "deleting"


class Rows:
    """Up to `capacity` rows of the named fields (`fields`: name -> (dtype, row shape)); the oldest
    are overwritten first."""

    def __init__(self, fields: Mapping[str, tuple[np.dtype, tuple[int, ...]]], capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.data = {name: np.zeros((capacity, *shape), dtype) for name, (dtype, shape) in fields.items()}
        self.size = 0
        self._next = 0

    def add(self, rows: Mapping[str, np.ndarray]) -> None:
        """Append rows (every field the same count of them), overwriting the oldest when full."""
        n = len(next(iter(rows.values())))
        if n > self.capacity:  # only the newest `capacity` rows would stay
            rows = {k: v[-self.capacity :] for k, v in rows.items()}
            n = self.capacity
        at = (self._next + np.arange(n)) % self.capacity
        for name, array in self.data.items():
            array[at] = rows[name]
        self._next = (self._next + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def clear(self) -> None:
        self.size = self._next = 0

    def sample(self, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        if self.size == 0:
            raise ValueError("sample from an empty replay")
        at = rng.integers(0, self.size, size=n)
        return {name: array[at] for name, array in self.data.items()}

    def save(self, path: Path) -> None:
        """Write the rows in order (oldest first) to `path` (.npz), atomically."""
        order = (self._next - self.size + np.arange(self.size)) % self.capacity
        tmp = path.with_name(path.name + ".tmp.npz")
        arrays: dict[str, Any] = {name: array[order] for name, array in self.data.items()}
        try:
            np.savez(tmp, **arrays)
            os.replace(tmp, path)
        except BaseException:  # a full disk: no half-written file left to fill it further
            tmp.unlink(missing_ok=True)
            raise

    def read(self, path: Path) -> dict[str, np.ndarray]:
        """The rows saved at `path`, not yet added. Raises ValueError when they are not this
        replay's fields, dtypes and shapes (and whatever numpy raises for a damaged file)."""
        with np.load(path, allow_pickle=False) as saved:
            if set(saved.files) != set(self.data):
                raise ValueError(f"it holds {sorted(saved.files)}, not {sorted(self.data)}")
            rows = {name: saved[name] for name in self.data}
        for name, array in rows.items():
            mine = self.data[name]
            if array.dtype != mine.dtype or array.shape[1:] != mine.shape[1:]:
                raise ValueError(f"{name} is {array.dtype}{list(array.shape[1:])}, "
                                 f"not {mine.dtype}{list(mine.shape[1:])}")  # fmt: skip
        if len({len(a) for a in rows.values()}) > 1:
            raise ValueError("its fields hold different numbers of rows")
        return rows


class RatioLimiter:
    """Rows sampled per row inserted held at `ratio`: with d = inserted × ratio − sampled, an insert
    waits while d is past `min_size` × ratio + `error_buffer` (it may then pass it by its own rows ×
    ratio: an actor's fragment goes in whole, whatever its size), a sample of n rows waits while
    fewer than `min_size` rows are in or d − n would fall below `min_size` × ratio − `error_buffer`.
    With `error_buffer` at least half the largest sample one of the two can always go on. So past
    the warm-up, sampled = (inserted − min_size) × ratio within `error_buffer` + one insert × ratio.
    Thread-safe; `open()` lets every insert through (the run's end: no learner samples any more)."""

    def __init__(self, ratio: float, min_size: int, error_buffer: float) -> None:
        if ratio <= 0 or min_size < 1 or error_buffer <= 0:
            raise ValueError(
                f"ratio > 0, min_size >= 1 and error_buffer > 0, got {ratio}, {min_size}, {error_buffer}"
            )
        self.ratio, self.min_size, self.error_buffer = ratio, min_size, error_buffer
        self.inserted = 0  # rows, since the shard started (a restored shard counts its restored rows)
        self.sampled = 0
        self.opened = False
        self._cond = threading.Condition()

    @property
    def _centre(self) -> float:
        return self.min_size * self.ratio

    def _d(self) -> float:
        return self.inserted * self.ratio - self.sampled

    def can_insert(self, n: int) -> bool:
        return self.opened or self._d() <= self._centre + self.error_buffer

    def can_sample(self, n: int) -> bool:
        return self.inserted >= self.min_size and self._d() - n >= self._centre - self.error_buffer

    def await_insert(self, n: int, timeout: float) -> bool:
        """Wait until `n` rows may go in (up to `timeout` s); count them and return True, or False."""
        with self._cond:
            if not self._cond.wait_for(lambda: self.can_insert(n), timeout):
                return False
            self.inserted += n
            self._cond.notify_all()
            return True

    def await_sample(self, n: int, timeout: float) -> bool:
        """Wait until `n` rows may be sampled (up to `timeout` s); count them and return True, or False."""
        with self._cond:
            if not self._cond.wait_for(lambda: self.can_sample(n), timeout):
                return False
            self.sampled += n
            self._cond.notify_all()
            return True

    def restored(self, n: int) -> None:
        """`n` rows came back from a save: they count as inserted and as sampled to the ratio, so
        the learner trains on them as it did before, not `ratio` times over again."""
        with self._cond:
            self.inserted += n
            self.sampled += int(max(0, n - self.min_size) * self.ratio)
            self._cond.notify_all()

    def open(self) -> None:
        with self._cond:
            self.opened = True
            self._cond.notify_all()


def error_buffer_for(sample_rows: int) -> float:
    """A band wide enough that samples of `sample_rows` and inserts never lock each other out
    (RatioLimiter), with room for one more sample in flight."""
    return float(2 * sample_rows)

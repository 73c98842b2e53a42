"""Thread-safe counters that the servicers bump and `LearnerServer.stats` snapshots."""

from __future__ import annotations

import threading
from collections import Counter


class Counters:
    """Named integer counters (and gauges, via negative increments), safe across grpc threads."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self._lock = threading.Lock()
        # Pre-seeded so a snapshot always shows every key, including the zeros.
        self._values: Counter[str] = Counter(dict.fromkeys(names, 0))

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._values[name] += n

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._values)

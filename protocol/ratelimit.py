"""Logging that a peer cannot flood: whatever a client sends, authenticated or not, must not grow
a log without bound (RejectionLog for our rejections, RateLimitFilter for grpc's own loggers)."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable

MAX_TEXT = 80  # characters of a peer-chosen string (worker id, detail) that reach a log line


def shown(text: str, max_text: int = MAX_TEXT) -> str:
    """`text` as it may appear in a log line: repr() (no newlines or control characters), cut."""
    quoted = repr(text)
    return quoted if len(quoted) <= max_text else quoted[: max_text - 4] + "...'"


class RejectionLog:
    """Tally of rejected items by source (a worker id, a peer address) and reason: the first is
    logged at once, then one summary line per `interval` names the sources that sent the most. At
    most `max_sources` sources are tracked per interval (the rest lumped together) and at most
    MAX_TEXT characters of what a peer chose are logged, so memory and lines stay bounded. Thread-safe."""

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        *,
        interval: float = 10.0,
        max_sources: int = 32,
        level: int = logging.WARNING,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log, self._what, self._level = logger, what, level
        self.interval, self._max_sources, self._clock = interval, max_sources, clock
        self._lock = threading.Lock()
        self._first_logged = False
        self._window_start = clock()
        self._by_source: dict[str, Counter[str]] = {}
        self._others = 0  # rejections from sources beyond max_sources, this interval

    def note(self, source: str, reason: str, detail: str = "") -> None:
        """Count one rejection of `source`'s item for `reason` (a fixed word, ours); `detail` (may
        contain what a peer sent) is logged only for the very first rejection."""
        with self._lock:
            if not self._first_logged:
                self._first_logged = True
                self._window_start = self._clock()
                text = f": {shown(detail, 2 * MAX_TEXT)}" if detail else ""
                self._log.log(
                    self._level, "rejected a %s from %s (%s)%s; further rejections are summarized "
                    "every %.0f s", self._what, shown(source), reason, text, self.interval,
                )  # fmt: skip
                return
            tally = self._by_source.get(source)
            if tally is None and len(self._by_source) < self._max_sources:
                tally = self._by_source[source] = Counter()
            if tally is None:
                self._others += 1
            else:
                tally[reason] += 1
        self.flush()

    def flush(self, force: bool = False) -> None:
        """Log the summary of the current interval if it is over (or `force`) and not empty."""
        with self._lock:
            now = self._clock()
            if not force and now - self._window_start < self.interval:
                return
            by_source, others = self._by_source, self._others
            self._by_source, self._others = {}, 0
            elapsed, self._window_start = now - self._window_start, now
        total = sum(sum(t.values()) for t in by_source.values()) + others
        if total == 0:
            return
        worst = sorted(by_source.items(), key=lambda item: -sum(item[1].values()))[:5]
        parts = [
            f"{shown(source)} {sum(t.values())} ({', '.join(f'{r} {n}' for r, n in t.most_common())})"
            for source, t in worst
        ]
        rest = total - sum(sum(t.values()) for _, t in worst)
        if rest:
            parts.append(f"{rest} from other sources")
        self._log.log(self._level, "rejected %d %ss in the last %.0f s: %s", total, self._what,
                      elapsed, "; ".join(parts))  # fmt: skip


class RateLimitFilter(logging.Filter):
    """Lets at most `burst` records of one logger and message template through per `interval`;
    the first record let through after a held-back stretch says how many were held back. Only
    records of loggers under `prefixes` are limited (all when empty)."""

    def __init__(self, prefixes: tuple[str, ...] = (), burst: int = 10, interval: float = 60.0,
                 max_keys: int = 256, clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        super().__init__()
        self.prefixes = prefixes
        self.burst, self.interval, self._max_keys, self._clock = burst, interval, max_keys, clock
        self._lock = threading.Lock()
        self._windows: dict[tuple[str, str], list[float | int]] = {}  # key -> [start, passed, held]

    def filter(self, record: logging.LogRecord) -> bool:
        if self.prefixes and not any(
            record.name == p or record.name.startswith(p + ".") for p in self.prefixes
        ):
            return True
        key = (record.name, str(record.msg))
        now = self._clock()
        with self._lock:
            window = self._windows.get(key)
            if window is None or now - float(window[0]) >= self.interval:
                held = int(window[2]) if window is not None else 0
                if window is None and len(self._windows) >= self._max_keys:
                    self._windows.clear()  # bounded memory; at worst a few extra lines
                self._windows[key] = [now, 1, 0]
                if held:
                    record.msg = f"{record.msg} [{held} similar records held back]"
                return True
            if int(window[1]) < self.burst:
                window[1] = int(window[1]) + 1
                return True
            window[2] = int(window[2]) + 1
            return False

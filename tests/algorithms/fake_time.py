"""A clock a test moves by hand, in place of the `time` module of the code under test, and the
part of a learner's server that only spends that time (the serving loop's waits for fragments)."""

from __future__ import annotations


class Clock:
    """`time` as the code under test calls it; `now` starts at `start`, and only sleeping (or
    the test) moves it."""

    def __init__(self, start: float) -> None:
        self.now = start

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class ClockServer:
    """A server whose wait for a fragment takes its whole timeout on `clock` and yields nothing."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def next_fragment(self, timeout: float) -> None:
        self.clock.now += timeout

    def release(self) -> None:
        pass

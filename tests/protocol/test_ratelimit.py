"""Logging a peer cannot flood: RejectionLog summaries and RateLimitFilter, on a fake clock."""

from __future__ import annotations

import logging

from surreal.protocol.ratelimit import RateLimitFilter, RejectionLog, shown


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records]


def test_the_first_rejection_is_logged_then_one_summary_per_interval(caplog):
    caplog.set_level(logging.INFO)
    clock = Clock()
    rejections = RejectionLog(logging.getLogger("t"), "fragment", interval=10.0, clock=clock)
    rejections.note("actor-3", "non_finite", "obs has 4 NaN values")
    assert (
        len(caplog.records) == 1 and "'actor-3' (non_finite): 'obs has 4 NaN values'" in messages(caplog)[0]
    )
    for i in range(1000):
        clock.now = i * 0.009  # 1000 rejections in 9 s: nothing more yet
        rejections.note("actor-3" if i % 10 else "rogue", "non_finite" if i % 3 else "bad_moments")
    assert len(caplog.records) == 1
    clock.now = 10.5
    rejections.note("actor-3", "non_finite")
    assert len(caplog.records) == 2
    summary = messages(caplog)[1]
    assert summary.startswith("rejected 1001 fragments in the last 10 s: 'actor-3' 901")
    assert "'rogue' 100 (" in summary
    clock.now = 15.0
    rejections.flush()  # the interval is not over
    assert len(caplog.records) == 2
    rejections.flush(force=True)  # nothing since the summary
    assert len(caplog.records) == 2


def test_memory_and_lines_stay_bounded_whatever_sources_a_peer_invents(caplog):
    clock = Clock()
    rejections = RejectionLog(logging.getLogger("t"), "call", interval=1.0, max_sources=4, clock=clock)
    for i in range(10_000):
        rejections.note(f"worker-{i}\n" + "x" * 1000, "invalid", "y" * 10_000)
    assert len(rejections._by_source) == 4
    clock.now = 2.0
    rejections.flush()
    assert len(caplog.records) == 2
    assert all(len(m) < 1000 and "\n" not in m for m in messages(caplog))
    assert "; 9995 from other sources" in messages(caplog)[1]


def test_shown_quotes_and_cuts_peer_text():
    assert shown("actor-1") == "'actor-1'"
    assert shown("a\nb") == "'a\\nb'"
    assert len(shown("z" * 500)) == 80 and shown("z" * 500).endswith("...'")


def test_rate_limit_filter_holds_back_repeats_of_one_template_and_says_how_many():
    clock = Clock()
    limit = RateLimitFilter(prefixes=("grpc",), burst=3, interval=60.0, clock=clock)

    def record(name: str, msg: str) -> logging.LogRecord:
        return logging.LogRecord(name, logging.ERROR, __file__, 1, msg, (), None)

    passed = [limit.filter(record("grpc._common", "Exception deserializing message!")) for _ in range(100)]
    assert passed.count(True) == 3
    assert limit.filter(record("grpc._server", "another template"))
    assert all(limit.filter(record("surreal.learner", "ours")) for _ in range(100))  # not limited
    clock.now = 61.0
    again = record("grpc._common", "Exception deserializing message!")
    assert limit.filter(again) and "[97 similar records held back]" in again.getMessage()

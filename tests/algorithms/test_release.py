"""owed_the_end: whom a finished learner keeps serving so that every worker sees `done`, and
whom it stops waiting for (a stream that stays open after the end belongs to a worker that does
not listen, as a hostile or buggy peer would)."""

from __future__ import annotations

from surreal.algorithms.common.serving import HANG_UP_SECONDS, owed_the_end

END = 1000.0


def test_a_reconnecting_worker_is_owed_until_it_opens_a_stream_after_the_end() -> None:
    missing, listening = owed_the_end(END, END + 5, {"actor-1"}, set(), {"actor-1": END - 3})
    assert (missing, listening) == ({"actor-1"}, set())
    # It came back: its new stream gets `done` with its first parameters.
    missing, listening = owed_the_end(END, END + 6, missing, {"actor-1"}, {"actor-1": END + 5.5})
    assert (missing, listening) == (set(), {"actor-1"})


def test_an_open_stream_is_waited_for_a_bounded_time_after_the_end() -> None:
    opened = {"actor-0": END - 100}
    assert owed_the_end(END, END + 1, set(), {"actor-0"}, opened) == (set(), {"actor-0"})
    assert owed_the_end(END, END + HANG_UP_SECONDS, set(), {"actor-0"}, opened) == (set(), set())


def test_a_stream_opened_after_the_end_gets_its_own_bound() -> None:
    opened = {"actor-0": END + 20}
    assert owed_the_end(END, END + 25, set(), {"actor-0"}, opened) == (set(), {"actor-0"})
    assert owed_the_end(END, END + 20 + HANG_UP_SECONDS, set(), {"actor-0"}, opened) == (set(), set())


def test_nothing_open_and_nobody_missing_owes_nothing() -> None:
    assert owed_the_end(END, END, set(), set(), {}) == (set(), set())

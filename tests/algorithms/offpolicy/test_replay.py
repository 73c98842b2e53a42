"""A replay shard's rows and the rate limiter that holds its replay ratio (no networking)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from surreal.runtime.offpolicy.replay import RatioLimiter, Rows, error_buffer_for

FIELDS = {"x": (np.dtype(np.float32), (2,)), "done": (np.dtype(bool), ())}


def _rows(start: int, n: int) -> dict[str, np.ndarray]:
    x = np.arange(start, start + n, dtype=np.float32)
    return {"x": np.stack([x, -x], 1), "done": x % 2 == 0}


def test_the_ring_keeps_the_newest_rows_and_saves_them_oldest_first(tmp_path: Path) -> None:
    rows = Rows(FIELDS, capacity=5)
    rows.add(_rows(0, 3))
    rows.add(_rows(3, 4))  # 7 rows into 5: 0 and 1 overwritten
    assert rows.size == 5
    assert sorted(rows.data["x"][:, 0].tolist()) == [2, 3, 4, 5, 6]
    sample = rows.sample(100, np.random.default_rng(0))
    assert sample["x"].shape == (100, 2) and set(sample["x"][:, 0].tolist()) <= {2, 3, 4, 5, 6}
    assert (sample["x"][:, 1] == -sample["x"][:, 0]).all()  # a row's fields stay together
    rows.save(tmp_path / "s.npz")
    again = Rows(FIELDS, capacity=5)
    again.add(again.read(tmp_path / "s.npz"))
    assert again.size == 5
    assert again.data["x"][:, 0].tolist() == [2, 3, 4, 5, 6]  # in order: the oldest is overwritten first


def test_a_save_of_other_fields_is_refused(tmp_path: Path) -> None:
    np.savez(tmp_path / "s.npz", x=np.zeros((3, 4), np.float32), done=np.zeros(3, bool))
    with pytest.raises(ValueError, match="x is float32\\[4\\], not float32\\[2\\]"):
        Rows(FIELDS, capacity=5).read(tmp_path / "s.npz")
    np.savez(tmp_path / "t.npz", y=np.zeros((3, 2), np.float32))
    with pytest.raises(ValueError, match="holds \\['y'\\]"):
        Rows(FIELDS, capacity=5).read(tmp_path / "t.npz")


def test_no_sample_before_min_size_and_inserts_wait_for_the_learner() -> None:
    limiter = RatioLimiter(ratio=4.0, min_size=10, error_buffer=error_buffer_for(8))
    assert not limiter.await_sample(8, timeout=0)
    assert limiter.await_insert(5, 0) and limiter.await_insert(5, 0)
    assert limiter.await_sample(8, 0)
    # Inserts run ahead until the band is full (one insert past it at most), then wait for samples.
    while limiter.await_insert(5, 0):
        pass
    ahead = limiter.inserted * 4.0 - limiter.sampled - 10 * 4.0
    assert limiter.error_buffer < ahead <= limiter.error_buffer + 5 * 4.0
    while not limiter.can_insert(5):  # the learner's samples let them in again
        assert limiter.await_sample(8, 0)
    assert limiter.await_insert(5, 0)


@pytest.mark.parametrize(
    ("ratio", "insert_rows", "sample_rows"), [(256.0, 16, 256), (0.5, 64, 32), (8.0, 1, 256)]
)
def test_greedy_actors_and_a_greedy_learner_are_held_at_the_ratio(ratio: float, insert_rows: int,
                                                                 sample_rows: int) -> None:  # fmt: skip
    """Both sides as fast as they can, on threads: neither locks the other out, and the rows sampled
    past the warm-up stay within the band (and one insert) of (rows inserted - min_size) x ratio."""
    min_size = 100
    limiter = RatioLimiter(ratio, min_size, error_buffer_for(sample_rows))
    stop = threading.Event()

    def learner() -> None:
        while not stop.is_set():
            limiter.await_sample(sample_rows, 0.05)

    thread = threading.Thread(target=learner)
    thread.start()
    try:
        while limiter.inserted < 20_000:
            assert limiter.await_insert(insert_rows, 5.0), "the inserts were locked out"
    finally:
        stop.set()
        thread.join()
    expected = (limiter.inserted - min_size) * ratio
    assert abs(limiter.sampled - expected) <= limiter.error_buffer + insert_rows * ratio


def test_restored_rows_are_not_trained_on_ratio_times_again() -> None:
    limiter = RatioLimiter(ratio=2.0, min_size=10, error_buffer=20.0)
    limiter.restored(1000)
    assert limiter.await_insert(20, 0) and not limiter.can_insert(1)  # as a live shard of 1000 rows
    assert limiter.await_sample(10, 0)
    limiter.open()
    assert limiter.can_insert(10**6)  # the run's end: every insert goes in

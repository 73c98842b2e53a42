"""What SAC's learner writes to TensorBoard: what PPO's does (the training return `surreal plot`
draws, steps/s), the update's statistics with its Q values, and the replay's size, ratio, update
share, refusals and losses. Driven by hand: a stand-in for the shards, a clock the test moves."""

from __future__ import annotations

import queue
from collections import deque
from typing import Any

import numpy as np
import pytest
from tensorboard.backend.event_processing import event_accumulator as ea

from surreal.algorithms.sac import SAC, SACConfig
from surreal.orchestrator.plot import TRAIN_TAG
from surreal.runtime.offpolicy import learner as learner_module
from surreal.runtime.offpolicy.learner import TB_EVERY, Learner
from surreal.runtime.offpolicy.shard import fields as replay_fields
from surreal.runtime.run import RunContext

ENV = "Pendulum-v1"


class Clock:
    """`time` for the learner: only the test moves it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def perf_counter(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now


class FakeShards:
    """The learner's side of the replay as the learner reads it: counts, returns and batches."""

    def __init__(self) -> None:
        self.batches: queue.Queue[dict[str, np.ndarray]] = queue.Queue()
        self.returns: deque[float] = deque()
        self.counts = {"size": 0, "inserted": 0, "sampled": 0, "refused": 3, "lost": 5}

    def total(self, field: str) -> int:
        return self.counts.get(field, 0)

    def actor_seconds(self) -> tuple[float, float]:
        return 0.0, 0.0

    def status(self) -> list[dict[str, Any]]:
        return [{"size": self.counts["size"], "reachable": True}]

    def close(self) -> None:
        pass


def test_sac_writes_the_training_curve_q_values_and_the_replay(tmp_path, monkeypatch: pytest.MonkeyPatch):
    clock = Clock()
    monkeypatch.setattr(learner_module, "time", clock)
    cfg = SACConfig(hidden_sizes=(16, 16), batch_size=8, learning_starts=8)
    shards = FakeShards()
    learner = Learner(SAC(), cfg, RunContext(ENV, 0, 10**9, 1, tmp_path, "127.0.0.1:1", "t"), None)
    learner.shards = shards  # type: ignore[assignment]
    rng = np.random.default_rng(0)
    fields = replay_fields(learner.spaces)
    for i in range(TB_EVERY):  # one batch per version; a second of the clock and 8 rows in each
        shards.batches.put({name: rng.uniform(-1, 1, (8, *shape)).astype(dtype)
                            for name, (dtype, shape) in fields.items()})  # fmt: skip
        shards.counts.update(size=8 * (i + 1), inserted=8 * (i + 1), sampled=256 * i)
        shards.returns.append(-100.0 - i)
        clock.now += 1.0
        assert learner.ready()
        learner.update()
        learner.params()
    learner.close()

    events = ea.EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    last = {tag: events.Scalars(tag)[-1].value for tag in events.Tags()["scalars"]}
    assert last[TRAIN_TAG] == pytest.approx(np.mean([-100.0 - i for i in range(80, 100)]))
    assert {"progress/steps_per_second", "train/critic_loss", "train/q_value"} <= set(last)
    assert np.isfinite(last["train/q_value"])
    assert last["replay/size"] == 8 * TB_EVERY
    assert last["replay/replay_ratio"] == pytest.approx(32.0)  # 256 sampled per 8 inserted
    assert 0.0 <= last["progress/update_share"] <= 1.0
    assert (last["replay/refused_fragments"], last["replay/lost"]) == (3, 5)

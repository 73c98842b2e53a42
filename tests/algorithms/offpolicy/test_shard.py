"""A replay shard over real gRPC on 127.0.0.1: what actors insert is distrusted (refused and
counted, the stream goes on), the learner samples, and a shard's rows outlive a SIGTERM (saved,
restored) while a SIGKILL's loss is counted."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest

from surreal.algorithms.envs.make import spaces_for
from surreal.algorithms.offpolicy.shard import Shard, serve
from surreal.algorithms.sac import SACConfig
from surreal.protocol import LearnerClient, LearnerServer, ProtocolError
from surreal.protocol.auth import TOKEN_METADATA_KEY
from surreal.protocol.client import rpc
from surreal.protocol.v1 import surreal_pb2 as pb

TOKEN = "t"
CFG = SACConfig(buffer_size=1000, learning_starts=8, replay_ratio=4.0, batch_size=4, fragment_length=8)


def _fragment(seed: int = 0, **change: object) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    tensors = {"obs": rng.standard_normal((8, 3)).astype(np.float32),
               "actions": rng.uniform(-1, 1, (8, 1)).astype(np.float32),
               "rewards": rng.standard_normal(8).astype(np.float32),
               "next_obs": rng.standard_normal((8, 3)).astype(np.float32),
               "terminated": np.zeros(8, bool), "episode_returns": np.array([-123.0])}  # fmt: skip
    for name, value in change.items():
        tensors[name] = value  # type: ignore[assignment]
    return tensors


@pytest.fixture
def shard(tmp_path: Path) -> Iterator[tuple[Shard, LearnerServer, LearnerClient]]:
    sp = spaces_for("Pendulum-v1")
    shard = Shard(CFG, sp, 0, 1, tmp_path)
    shard.restore()
    server = serve(shard, TOKEN)
    client = LearnerClient(f"127.0.0.1:{server.start()}", TOKEN)
    yield shard, server, client
    client.close()
    server.stop(grace=0)


def _take(shard: Shard, server: LearnerServer, count: int) -> list[bool | None]:
    """What the replay role's loop does with `count` fragments: insert each, then grant its credit."""
    out = []
    for _ in range(count):
        fragment = server.next_fragment(timeout=5.0)
        assert fragment is not None
        out.append(shard.insert(fragment, wait=1.0))
        server.release()
    return out


def test_bad_contents_are_refused_and_counted_and_the_stream_goes_on(shard) -> None:
    shard, server, client = shard
    stream = client.experience("actor-0")
    bad_obs = _fragment(obs=np.full((8, 3), np.nan, np.float32))
    out_of_space = _fragment(actions=np.full((8, 1), 1.5, np.float32))
    huge_reward = _fragment(rewards=np.full(8, 1e9, np.float32))
    uneven = _fragment(next_obs=np.zeros((7, 3), np.float32))
    for tensors in (_fragment(1), bad_obs, out_of_space, huge_reward, uneven, _fragment(2)):
        stream.send(0, tensors, timeout=5.0)
        assert len(_take(shard, server, 1)) == 1
    state = shard.state()
    assert (state.size, state.inserted, state.refused) == (16, 16, 4)

    sampled = client.sample(4, wait=1.0)
    assert (
        sampled.rows is not None
        and sampled.rows["obs"].shape == (4, 3)
        and sampled.rows["terminated"].dtype == bool
    )
    assert sampled.state.size == 16 and sampled.state.sampled == 4
    assert sampled.episode_returns == (-123.0, -123.0)  # the two good fragments' episodes, once
    assert client.sample(4, wait=0.0).episode_returns == ()


def test_a_wrong_shape_ends_that_stream_only(shard) -> None:
    shard, server, client = shard
    stream = client.experience("actor-0")
    stream.send(0, _fragment(obs=np.zeros((8, 4), np.float32)), timeout=5.0)
    with pytest.raises(ProtocolError, match="INVALID_ARGUMENT"):
        for _ in range(50):
            stream.send(0, _fragment(), timeout=0.1)
    assert server.stats["rejected_invalid"] == 1 and shard.state().malformed == 1  # status has it
    client.experience("actor-1").send(0, _fragment(), timeout=5.0)
    assert _take(shard, server, 1) == [True]
    shard.note()  # a replacement (after a SIGKILL or SIGTERM) goes on counting from its note
    replacement = Shard(CFG, spaces_for("Pendulum-v1"), 0, 1, shard.dir.parent)
    replacement.restore()
    assert replacement.state().malformed == 1


def test_the_limiter_holds_a_sample_and_bad_requests_are_refused(shard) -> None:
    shard, server, client = shard
    assert client.sample(4, wait=0.05).rows is None  # nothing in yet: "not ready", after its wait
    sample = rpc(client._channel, "Replay", "Sample")
    for rows, wait_ms in ((0, 0), (1 << 17, 0), (4, 60_000)):
        with pytest.raises(grpc.RpcError) as err:
            sample(
                pb.SampleRequest(rows=rows, wait_ms=wait_ms),
                metadata=((TOKEN_METADATA_KEY, TOKEN),),
                timeout=5,
            )
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert server.stats["rejected_samples"] == 3


def test_a_sigterm_keeps_the_rows_and_a_sigkill_counts_them_lost(tmp_path: Path) -> None:
    sp = spaces_for("Pendulum-v1")
    first = Shard(CFG, sp, 1, 2, tmp_path)
    first.restore()
    first.limiter.open()
    for seed in range(3):
        first.rows.add({k: v for k, v in _fragment(seed).items() if k in first.rows.data})
        first.limiter.await_insert(8, 0)
    first.save()  # SIGTERM
    second = Shard(CFG, sp, 1, 2, tmp_path)
    second.restore()
    assert (second.rows.size, second.state().restored, second.state().lost) == (24, 24, 0)
    assert second.state().inserted == 24  # counted once, not again for the restore
    second.note()  # then SIGKILL: no save, only its last note
    third = Shard(CFG, sp, 1, 2, tmp_path)
    third.restore()
    assert (third.rows.size, third.state().lost, third.state().inserted) == (0, 24, 24)
    other = Shard(dataclasses.replace(CFG), sp, 0, 2, tmp_path)  # shard 0's files are its own
    other.restore()
    assert other.state().lost == 0

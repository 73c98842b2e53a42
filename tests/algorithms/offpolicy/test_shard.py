"""A replay shard over real gRPC on 127.0.0.1: what actors insert is distrusted (refused and
counted, the stream goes on), the learner samples, and a shard's rows outlive a SIGTERM (saved,
restored) while a SIGKILL's loss is counted."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from surreal.algorithms.sac import SACConfig
from surreal.protocol import LearnerClient, LearnerServer, ProtocolError
from surreal.protocol.auth import TOKEN_METADATA_KEY
from surreal.protocol.client import rpc
from surreal.protocol.ratelimit import RejectionLog
from surreal.protocol.types import Fragment, ReplayState
from surreal.protocol.v1 import surreal_pb2 as pb
from surreal.runtime.envs.make import spaces_for
from surreal.runtime.offpolicy.learner import Learner, Shards
from surreal.runtime.offpolicy.shard import Shard, fragment_problem, serve

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


def test_a_fragment_holds_at_most_what_its_worker_stepped_and_returns_what_an_episode_earns(tmp_path) -> None:
    """A forged insert of many rows would count as env steps, a return of 1e300 would move
    train_return: both refused and counted, as is a fragment with more episode ends than steps."""
    shard = Shard(CFG, spaces_for("Pendulum-v1"), 0, 1, tmp_path, agents=2, episode_steps=200)
    shard.restore()
    assert (shard.max_rows, shard.max_return) == (16, 200 * CFG.max_abs_reward)
    two = {k: np.concatenate([v, v]) for k, v in _fragment().items() if k != "episode_returns"}
    honest = Fragment("actor-0", 0, {**two, "episode_returns": np.array([-1.0])})
    forged = Fragment("actor-0", 0, {k: np.concatenate([v, v]) for k, v in honest.tensors.items()})
    cases = ((forged.tensors, "more rows than a worker steps"),
             (_fragment(episode_returns=np.array([1e300])), "episode return beyond"),
             (_fragment(episode_returns=np.zeros(9)), "more episode returns than rows"))  # fmt: skip
    for tensors, reason in cases:
        problem = fragment_problem(
            shard.spaces, tensors, CFG.max_abs_reward, shard.max_rows, shard.max_return
        )
        assert problem is not None and reason in problem.detail
        assert shard.insert(Fragment("actor-0", 0, tensors), wait=0.0) is None
    assert shard.insert(honest, wait=1.0) is True
    assert (shard.state().refused, shard.state().inserted) == (3, 16)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.integers(1, 40), agents=st.integers(1, 4), ret=st.floats(-1e12, 1e12), limit=st.integers(1, 1000)
)
def test_the_bounds_refuse_exactly_what_no_worker_could_send(tmp_path, rows, agents, ret, limit) -> None:
    sp = spaces_for("Pendulum-v1")
    tensors = {
        k: np.resize(v, (rows, *v.shape[1:])) for k, v in _fragment().items() if k != "episode_returns"
    }
    tensors["episode_returns"] = np.array([ret])
    max_rows = CFG.fragment_length * CFG.envs_per_agent * agents
    problem = fragment_problem(sp, tensors, CFG.max_abs_reward, max_rows, CFG.max_abs_reward * limit)
    assert (problem is None) == (rows <= max_rows and abs(ret) <= CFG.max_abs_reward * limit), problem


def test_refusals_are_logged_once_then_summarized(tmp_path, caplog) -> None:
    """An env whose every reward is beyond max_abs_reward: thousands of refusals, a few lines."""
    now = [0.0]
    shard = Shard(CFG, spaces_for("Pendulum-v1"), 0, 1, tmp_path)
    shard.refusals = RejectionLog(logging.getLogger("surreal.runtime.offpolicy.shard"), "fragment",
                                  clock=lambda: now[0])  # fmt: skip
    huge = Fragment("actor-0", 0, _fragment(rewards=np.full(8, 1e9, np.float32)))
    with caplog.at_level(logging.WARNING):
        for i in range(3000):
            now[0] = i * 0.01  # 30 s of refusals
            assert shard.insert(huge, wait=0.0) is None
        shard.note()
    lines = [r.getMessage() for r in caplog.records if "reject" in r.getMessage()]
    assert shard.state().refused == 3000 and 2 <= len(lines) <= 4, lines
    assert "out_of_range" in lines[-1] and "'actor-0'" in lines[-1]


def test_calls_the_shard_refuses_at_the_wire_are_counted_and_outlive_it(shard) -> None:
    shard, server, client = shard
    sample = rpc(client._channel, "Replay", "Sample")
    for metadata, rows in ((((TOKEN_METADATA_KEY, "wrong"),), 4), (((TOKEN_METADATA_KEY, TOKEN),), 0)):
        with pytest.raises(grpc.RpcError):
            sample(pb.SampleRequest(rows=rows, wait_ms=0), metadata=metadata, timeout=5)
    state = shard.state()
    assert (state.unauthenticated, state.bad_samples) == (1, 1)
    assert client.status()["unauthenticated"] == 1  # what the learner reads when no sample comes
    shard.note()
    replacement = Shard(CFG, spaces_for("Pendulum-v1"), 0, 1, shard.dir.parent)
    replacement.restore()
    assert (replacement.state().unauthenticated, replacement.state().bad_samples) == (1, 1)


def test_the_learner_follows_a_shards_counts_while_no_update_takes_its_batches(tmp_path) -> None:
    """A done learner takes no batch while its final evaluation runs; the shard's refusals then
    (an actor that has not yet seen the end) still reach status, as do its wire refusals."""
    shard = Shard(CFG, spaces_for("Pendulum-v1"), 0, 1, tmp_path)
    shard.restore()
    server = serve(shard, TOKEN)
    addr = f"127.0.0.1:{server.start()}"
    for seed in range(2):
        assert shard.insert(Fragment("actor-0", 0, _fragment(seed)), wait=1.0)
    shards = Shards((addr,), TOKEN, rows=4)
    try:
        _until(shards.batches.full)
        bad = Fragment("actor-0", 0, _fragment(rewards=np.full(8, np.nan, np.float32)))
        for _ in range(5):
            assert shard.insert(bad, wait=0.0) is None
        with pytest.raises(ProtocolError):
            LearnerClient(addr, "wrong").sample(4, wait=0.0)
        # Both counts in one state: a state the pull thread took between the refusals and the refused
        # call would show the one without the other (it lost once that way under load).
        _until(lambda: (s := shards.states[0]) is not None and (s.refused, s.unauthenticated) == (5, 1))
        status = Learner.replay_status(SimpleNamespace(shards=shards, _rates=(), cfg=CFG))  # type: ignore[arg-type]
        assert status["refused_fragments"] == 5 and status["wire_rejections"]["unauthenticated"] == 1
    finally:
        shards.close()
        server.stop(grace=0)


def test_the_learner_counts_only_the_growth_of_a_shards_actor_time() -> None:
    """What the off-policy learner's actors' wait share is made of: each shard's actor time as it
    grows while this learner hears it. A shard first heard late (after a learner restart) brings
    no history into the window, and one restarted from an older note does not count backwards."""
    shards = Shards.__new__(Shards)  # no threads: its states as the pull threads would hear them
    shards.states, shards.actor_ms = [None, None], [(0, 0), (0, 0)]
    heard = [(0, 50_000, 40_000), (0, 51_000, 40_500), (1, 10, 0), (1, 1_010, 0)]
    for i, span, waited in heard:
        shards._heard(i, ReplayState(actor_span_ms=span, actor_waited_ms=waited))
    assert shards.actor_seconds() == (2.0, 0.5)
    for span, waited in [(49_000, 39_000), (50_000, 40_000)]:  # SIGKILLed: from its last note
        shards._heard(0, ReplayState(actor_span_ms=span, actor_waited_ms=waited))
    assert shards.actor_seconds() == (3.0, 1.5)


def _until(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)

"""What a buggy or hostile client can do to a LearnerServer: bytes that are no message, on every
method; absurd hellos and eval reports; a flood. Each call is refused, counted and logged at a
bounded rate, and the server still stops within its bound."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from surreal.protocol.client import rpc
from surreal.protocol.v1 import surreal_pb2 as pb

TOKEN_MD = (("x-surreal-token", "test-token"),)
UNARY = ("/surreal.v1.Parameters/Get", "/surreal.v1.Status/Get", "/surreal.v1.Status/ReportEval",
         "/grpc.health.v1.Health/Check")  # fmt: skip
STREAM = "/surreal.v1.Experience/Stream"
GARBAGE = b"\xff\xff\xff\xff\x0f"  # a varint that never ends: no protobuf message parses it


def _raw_unary(channel: grpc.Channel, method: str):
    return channel.unary_unary(method, request_serializer=lambda b: b, response_deserializer=lambda b: b)


def _raw_stream(channel: grpc.Channel):
    return channel.stream_stream(STREAM, request_serializer=lambda b: b, response_deserializer=lambda b: b)


def _drain(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        for _ in call:
            pass
    return info.value


@pytest.mark.parametrize("method", UNARY)
def test_undecodable_request_is_invalid_argument_on_every_unary_method(make_server, method) -> None:
    server, address = make_server(on_eval=lambda report: None)
    with grpc.insecure_channel(address) as channel:
        with pytest.raises(grpc.RpcError) as info:
            _raw_unary(channel, method)(GARBAGE, metadata=TOKEN_MD, timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "undecodable" in info.value.details()
    assert server.stats["rejected_undecodable"] == 1


@pytest.mark.parametrize("position", ["hello", "fragment"])
def test_undecodable_stream_message_aborts_the_stream(make_server, position) -> None:
    server, address = make_server()
    hello = pb.ExperienceRequest(hello=pb.Hello(worker_id="w")).SerializeToString()
    messages = [GARBAGE] if position == "hello" else [hello, GARBAGE]
    with grpc.insecure_channel(address) as channel:
        error = _drain(_raw_stream(channel)(iter(messages), metadata=TOKEN_MD, timeout=5))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "undecodable" in error.details()
    assert server.stats["rejected_undecodable"] == 1
    assert server.stats["connected_streams"] == 0


@pytest.mark.parametrize("worker_id", ["", "x" * 129, "line\nbreak"])
def test_a_hello_with_an_unusable_worker_id_is_refused(make_server, worker_id) -> None:
    server, address = make_server()
    hello = pb.ExperienceRequest(hello=pb.Hello(worker_id=worker_id)).SerializeToString()
    with grpc.insecure_channel(address) as channel:
        error = _drain(_raw_stream(channel)(iter([hello]), metadata=TOKEN_MD, timeout=5))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert server.stats["rejected_invalid"] == 1 and server.stats["streams_opened"] == 0


@pytest.mark.parametrize(
    "report",
    [
        pb.EvalReport(policy_version=1, env_steps=5, mean_return=float("nan"), episodes=1),
        pb.EvalReport(policy_version=1, env_steps=5, mean_return=1.0, mean_length=float("inf"), episodes=1),
        pb.EvalReport(policy_version=1, env_steps=5, mean_return=1.0, episodes=0),
        pb.EvalReport(policy_version=-1, env_steps=5, mean_return=1.0, episodes=1),
        pb.EvalReport(policy_version=1, env_steps=5, mean_return=1.0, std_return=-2.0, episodes=1),
    ],
)
def test_an_eval_report_that_cannot_be_true_is_refused(make_server, report) -> None:
    received = []
    server, address = make_server(on_eval=received.append)
    with grpc.insecure_channel(address) as channel:
        with pytest.raises(grpc.RpcError) as info:
            rpc(channel, "Status", "ReportEval")(report, metadata=TOKEN_MD, timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert received == [] and server.stats["rejected_evals"] == 1


def test_health_serves_check_only(make_server) -> None:
    _, address = make_server()
    with grpc.insecure_channel(address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        assert health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == (
            health_pb2.HealthCheckResponse.SERVING
        )
        # Watch holds a server thread per call, and health needs no token: not served.
        error = _drain(health.Watch(health_pb2.HealthCheckRequest(), timeout=5))
    assert error.code() == grpc.StatusCode.UNIMPLEMENTED


def _flood(address: str, seconds: float, token_md) -> int:
    """Random bytes on every method, as fast as one client thread can send them."""
    deadline, calls, rng = time.monotonic() + seconds, 0, random.Random(0)
    with grpc.insecure_channel(address) as channel:
        while time.monotonic() < deadline:
            try:
                if rng.random() < 0.4:
                    messages = [os.urandom(rng.randint(0, 300)) for _ in range(3)]
                    for _ in _raw_stream(channel)(iter(messages), metadata=token_md, timeout=1):
                        pass
                else:
                    _raw_unary(channel, rng.choice(UNARY))(os.urandom(rng.randint(0, 300)),
                                                          metadata=token_md, timeout=1)  # fmt: skip
            except grpc.RpcError:
                pass
            calls += 1
    return calls


def test_a_flood_of_garbage_is_refused_logged_briefly_and_the_server_still_stops(make_server, caplog) -> None:
    """grpcio 1.85 left a stream half-finished after its own deserializer failed, and then
    server.stop() never completed (the learner of a run under such traffic never exited)."""
    caplog.set_level(logging.INFO)
    server, address = make_server(on_eval=lambda report: None)
    threads = [threading.Thread(target=_flood, args=(address, 3.0, md))
               for md in (TOKEN_MD, TOKEN_MD, (("x-surreal-token", "wrong"),))]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats = server.stats
    assert stats["rejected_undecodable"] > 100 and stats["rejected_auth"] > 100
    started = time.monotonic()
    assert server.stop(grace=0.5, timeout=5.0)
    assert time.monotonic() - started < 3.0
    ours = [r for r in caplog.records if r.name.startswith("surreal")]
    grpcs = [r for r in caplog.records if r.name.startswith("grpc")]
    # First rejection of each kind, and one summary per kind at stop; nothing from grpc itself.
    assert len(ours) <= 6, [r.getMessage() for r in ours]
    assert grpcs == []


def test_stop_forces_a_server_whose_graceful_stop_does_not_end(make_server, monkeypatch) -> None:
    server, address = make_server()
    real_stop, calls = server._server.stop, []

    async def first_call_hangs(grace):
        calls.append(grace)
        if len(calls) == 1:
            await asyncio.Event().wait()
        await real_stop(grace)

    monkeypatch.setattr(server._server, "stop", first_call_hangs)
    started = time.monotonic()
    assert server.stop(grace=0.2, timeout=0.5) is False  # said, and logged
    assert 0.6 <= time.monotonic() - started < 3.0
    assert calls == [0.2, 0]
    with grpc.insecure_channel(address) as channel:  # the port is closed
        with pytest.raises(grpc.RpcError) as info:
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE

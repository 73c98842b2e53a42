"""LearnerServer + LearnerClient over real gRPC on 127.0.0.1: auth, health, parameters, status,
message limits, TLS and shutdown. (Experience streams: test_experience_stream.py.)"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from surreal.protocol import EvalReport, Params, ProtocolError
from surreal.protocol import server as server_module
from surreal.protocol.client import rpc
from surreal.protocol.v1 import surreal_pb2 as pb


def _params(version: int, n: int = 10) -> Params:
    return Params(
        version=version,
        weights={"w": np.arange(n, dtype=np.float32), "b": np.array(version, dtype=np.float64)},
        extras={"obs_mean": np.zeros(3, np.float64)},
    )


# ---- auth and health


@pytest.mark.parametrize("token", ["wrong", ""], ids=["wrong-token", "empty-token"])
def test_bad_token_is_unauthenticated_on_every_call(make_server, make_client, token) -> None:
    server, address = make_server()
    client = make_client(address, token=token)
    calls = {
        "get_params": lambda: client.get_params(),
        "status": lambda: client.status(),
        "report_eval": lambda: client.report_eval(EvalReport(1, 2, 3.0, 0.0, 1, 5.0)),
        "stream": lambda: client.experience("w").send(0, {}, timeout=5),
    }
    for name, call in calls.items():
        with pytest.raises(ProtocolError) as info:
            call()
        assert info.value.code == "UNAUTHENTICATED", name
    assert server.stats["rejected_auth"] == 4
    assert server.stats["streams_opened"] == 0


def test_missing_token_is_unauthenticated_but_health_is_open(make_server) -> None:
    server, address = make_server()
    with grpc.insecure_channel(address) as channel:
        with pytest.raises(grpc.RpcError) as info:
            rpc(channel, "Parameters", "Get")(pb.GetParams(), timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as info:
            rpc(channel, "Status", "Get")(pb.StatusRequest(), timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "surreal.v1.Experience"):
            reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    assert server.stats["rejected_auth"] == 2


def test_wait_ready_then_stop(make_server, make_client) -> None:
    server, address = make_server()
    client = make_client(address)
    client.wait_ready(timeout=5)
    server.stop(grace=0)
    server.stop(grace=0)  # idempotent
    with pytest.raises(ProtocolError) as info:
        client.wait_ready(timeout=0.5)
    assert info.value.code == "UNAVAILABLE"
    assert server.next_fragment(timeout=None) is None  # stopped: never blocks


def test_stop_wakes_a_learner_blocked_in_next_fragment(make_server) -> None:
    server, _ = make_server()
    result: list[object] = []
    learner = threading.Thread(target=lambda: result.append(server.next_fragment(None)))
    learner.start()
    server.stop(grace=0)
    learner.join(5)
    assert not learner.is_alive() and result == [None]


# ---- parameters


def test_get_params_full_then_unchanged(make_server, make_client) -> None:
    server, address = make_server()
    client = make_client(address)
    assert client.get_params() is None  # nothing published yet
    server.publish(_params(3))
    got = client.get_params(known_version=-1)
    assert got is not None and got.version == 3
    np.testing.assert_array_equal(got.weights["w"], np.arange(10, dtype=np.float32))
    assert got.weights["b"].shape == () and got.weights["b"] == 3.0
    np.testing.assert_array_equal(got.extras["obs_mean"], np.zeros(3))
    assert client.get_params(known_version=3) is None
    server.publish(_params(4))
    assert client.get_params(known_version=3).version == 4  # type: ignore[union-attr]
    assert server.stats["params_full"] == 2
    assert server.stats["params_unchanged"] == 2


def test_behind_counts_the_recent_askers_that_hold_an_older_version(make_server, make_client) -> None:
    """What a learner waits for at its end: those polling for parameters (a peer: a worker
    process's connection) that have not yet been answered the last version."""
    server, address = make_server()
    client = make_client(address)
    server.publish(_params(3))
    assert client.get_params(known_version=-1) is not None
    assert server.behind(3, within=60.0) == 0
    server.publish(_params(4))
    assert server.behind(4, within=60.0) == 1  # it asked lately and holds 3
    assert server.behind(4, within=0.0) == 0  # one that has not asked lately is not waited for
    assert client.get_params(known_version=3) is not None  # answered 4
    assert server.behind(4, within=60.0) == 0
    assert client.get_params(known_version=4) is None  # it holds 4: "unchanged"
    assert server.behind(4, within=60.0) == 0


def test_unchanged_reply_carries_no_weights(make_server, token) -> None:
    server, address = make_server()
    server.publish(_params(7, n=50_000))
    with grpc.insecure_channel(address) as channel:
        get = rpc(channel, "Parameters", "Get")
        metadata = (("x-surreal-token", token),)
        full = get(pb.GetParams(known_version=6), timeout=5, metadata=metadata)
        same = get(pb.GetParams(known_version=7), timeout=5, metadata=metadata)
    assert not full.unchanged and len(full.weights) == 2 and full.ByteSize() > 200_000
    assert same.unchanged and same.version == 7
    assert len(same.weights) == 0 and len(same.extras) == 0 and same.ByteSize() < 16


def test_publish_encodes_once_not_per_call(make_server, make_client, monkeypatch) -> None:
    calls = []
    real = server_module.encode_map
    monkeypatch.setattr(server_module, "encode_map", lambda a: calls.append(1) or real(a))
    server, address = make_server()
    client = make_client(address)
    server.publish(_params(1))
    for _ in range(5):
        assert client.get_params().version == 1  # type: ignore[union-attr]
    assert len(calls) == 2  # weights + extras, once


# ---- status and evaluation


def test_status_round_trip_and_eval_report(make_server, make_client) -> None:
    reports: list[EvalReport] = []
    status = {"env_steps": 123, "train_return": -1.5, "done": False, "components": ["a"]}
    server, address = make_server(status_provider=lambda: status, on_eval=reports.append)
    client = make_client(address)
    assert client.status() == status
    report = EvalReport(
        policy_version=4, env_steps=4096, mean_return=12.5, std_return=1.25, episodes=10,
        mean_length=200.0,
    )  # fmt: skip
    client.report_eval(report)
    assert reports == [report]
    assert server.stats["evals_received"] == 1 and server.stats["status_requests"] == 1


def test_the_evaluator_is_heard_from_when_it_says_so_or_reports(make_server, make_client) -> None:
    server, address = make_server(on_eval=lambda report: None)
    client = make_client(address)
    client.get_params()  # an actor's call says nothing of the evaluator
    assert server.evaluator_heard_at is None
    before = time.monotonic()
    client.get_params(role="evaluator")
    heard = server.evaluator_heard_at
    assert heard is not None and heard >= before
    client.report_eval(EvalReport(1, 1, 0.0, 0.0, 1, 1.0))
    assert server.evaluator_heard_at is not None and server.evaluator_heard_at >= heard


def test_status_without_provider_and_eval_without_handler(make_server, make_client) -> None:
    _, address = make_server()
    client = make_client(address)
    assert client.status() == {}
    with pytest.raises(ProtocolError) as info:
        client.report_eval(EvalReport(1, 1, 0.0, 0.0, 1, 1.0))
    assert info.value.code == "FAILED_PRECONDITION"


def test_failing_status_provider_is_internal_not_a_crash(make_server, make_client) -> None:
    _, address = make_server(status_provider=lambda: {"bad": object()})
    client = make_client(address)
    with pytest.raises(ProtocolError) as info:
        client.status()
    assert info.value.code == "INTERNAL"


# ---- message limits


def test_oversized_params_are_refused_at_publish(make_server) -> None:
    server, _ = make_server(max_message_bytes=64 * 1024)
    with pytest.raises(ValueError, match="max_message_bytes"):
        server.publish(_params(1, n=32 * 1024))


def test_reply_over_the_client_limit_is_resource_exhausted(make_server, make_client) -> None:
    server, address = make_server()
    server.publish(_params(1, n=16 * 1024))
    client = make_client(address, max_message_bytes=32 * 1024)
    with pytest.raises(ProtocolError) as info:
        client.get_params()
    assert info.value.code == "RESOURCE_EXHAUSTED"


# ---- TLS


def _self_signed(tmp_path: Path) -> tuple[bytes, bytes]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl not installed")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    return key.read_bytes(), cert.read_bytes()


def test_tls(make_server, make_client, tmp_path) -> None:
    key, cert = _self_signed(tmp_path)
    server, address = make_server(tls=(key, cert))
    server.publish(_params(2))
    assert make_client(address, tls_root=cert).get_params().version == 2  # type: ignore[union-attr]
    with pytest.raises(ProtocolError) as info:
        make_client(address).get_params(timeout=2)  # plaintext client, TLS server
    assert info.value.code == "UNAVAILABLE"


def test_constructor_validates_arguments() -> None:
    from surreal.protocol import LearnerServer

    with pytest.raises(ValueError, match="token"):
        LearnerServer(token="", experience_schema={})
    with pytest.raises(ValueError, match="credits_per_stream"):
        LearnerServer(token="t", experience_schema={}, credits_per_stream=0)
    with pytest.raises(ValueError, match="max_streams"):
        LearnerServer(token="t", experience_schema={}, max_streams=0)

"""Bad input on the wire against a real, training learner started by the CLI.

Each bad call gets the right gRPC status; a flood of random bytes (raw TCP, and as gRPC messages
on every method, with and without the token) is refused and logged in a few lines; the learner
keeps training, the run ends Succeeded and every process of it exits.
"""

from __future__ import annotations

import json
import os
import random
import socket
import threading
import time

import grpc
import numpy as np
import pytest
from cli_harness import Cli, ended, running, wait_for

from surreal.protocol import LearnerClient, ProtocolError
from surreal.protocol.v1 import surreal_pb2 as pb
from surreal.protocol.v1 import surreal_pb2_grpc as pb_grpc

pytestmark = pytest.mark.slow

STEPS = 100_000  # long enough to outlast the set-up and the flood on a busy machine
FLOOD_SECONDS = 15.0
METHODS = ("/surreal.v1.Experience/Stream", "/surreal.v1.Parameters/Get", "/surreal.v1.Status/Get",
           "/surreal.v1.Status/ReportEval", "/grpc.health.v1.Health/Check")  # fmt: skip


def _raw_stream(address: str, token: str, fragment: pb.Fragment) -> grpc.RpcError:
    requests = [pb.ExperienceRequest(hello=pb.Hello(worker_id="rogue")),
                pb.ExperienceRequest(fragment=fragment)]  # fmt: skip
    with grpc.insecure_channel(address) as channel:
        call = pb_grpc.ExperienceStub(channel).Stream(
            iter(requests), metadata=(("x-surreal-token", token),), timeout=10
        )
        with pytest.raises(grpc.RpcError) as info:
            for _ in call:
                pass
    return info.value


def _grpc_garbage(address: str, token: str, until: float, seed: int) -> None:
    rng, metadata = random.Random(seed), (("x-surreal-token", token),)
    with grpc.insecure_channel(address) as channel:
        while time.monotonic() < until:
            method = rng.choice(METHODS)
            try:
                if method.endswith("/Stream"):
                    call = channel.stream_stream(method, lambda b: b, lambda b: b)
                    requests = [os.urandom(rng.randint(0, 500)) for _ in range(rng.randint(1, 4))]
                    for _ in call(iter(requests), metadata=metadata, timeout=1):
                        pass
                else:
                    call = channel.unary_unary(method, lambda b: b, lambda b: b)
                    call(os.urandom(rng.randint(0, 500)), metadata=metadata, timeout=1)
            except grpc.RpcError:
                pass


def _tcp_garbage(host: str, port: int, until: float, seed: int) -> None:
    rng = random.Random(seed)
    while time.monotonic() < until:
        try:
            with socket.create_connection((host, port), timeout=1) as s:
                s.sendall(os.urandom(rng.randint(1, 4000)))
        except OSError:
            pass


def test_rejections_and_a_flood_do_not_disturb_training(cli: Cli) -> None:
    cli.run("create", "wire", "--algo", "ppo", "--env", "CartPole-v1", "--agents", "2",
            "--steps", str(STEPS), "--set", "eval_episodes=2", "--detach", timeout=120)  # fmt: skip
    exp_dir = cli.exp_dir("wire")
    program = json.loads((exp_dir / "program.json").read_text())
    learner = next(c for c in program["components"] if c["role"] == "learner")
    address = learner["env"]["SURREAL_LEARNER_ADDR"]
    host, port = address.rsplit(":", 1)
    token = (exp_dir / "token").read_text().strip()
    wait_for(lambda: running(cli, "wire"), 120, "training to start")

    for bad_token in ("", "wrong-token"):
        client = LearnerClient(address, bad_token)
        with pytest.raises(ProtocolError) as info:
            client.get_params()
        assert info.value.code == "UNAUTHENTICATED"
        client.close()

    obs_ok = pb.Tensor(name="obs", dtype=pb.FLOAT32, shape=[1, 1, 4], data=bytes(16))
    short = pb.Tensor(name="obs", dtype=pb.FLOAT32, shape=[33, 2, 4], data=bytes(16))
    stranger = pb.Tensor(name="not_a_tensor", dtype=pb.FLOAT32, shape=[1], data=bytes(4))
    for tensors in ([short], [obs_ok, stranger]):
        error = _raw_stream(address, token, pb.Fragment(policy_version=0, tensors=tensors))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()

    huge = pb.Tensor(name="obs", dtype=pb.UINT8, shape=[80 * 2**20],
                     data=np.zeros(80 * 2**20, np.uint8).tobytes())  # fmt: skip
    error = _raw_stream(address, token, pb.Fragment(policy_version=0, tensors=[huge]))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

    until = time.monotonic() + FLOOD_SECONDS
    flood = [
        threading.Thread(target=_grpc_garbage, args=(address, token, until, 1)),
        threading.Thread(target=_grpc_garbage, args=(address, "wrong", until, 2)),
        threading.Thread(target=_tcp_garbage, args=(host, int(port), until, 3)),
    ]
    before = cli.status("wire")["env_steps"]
    for t in flood:
        t.start()
    for t in flood:
        t.join()
    during = cli.status("wire")
    assert during["phase"] == "Running" and during["env_steps"] > before, during
    wire = during["wire_rejections"]
    assert wire["undecodable"] > 50 and wire["unauthenticated"] > 50, wire

    final = wait_for(lambda: ended(cli, "wire"), 600, "the end of the run", poll=0.5)
    assert final["phase"] == "Succeeded", final
    assert final["env_steps"] >= STEPS
    assert all(c["restarts"] == 0 for c in final["components"]), final["components"]
    # Every process of the run is gone (the learner used to hang in its server's stop).
    wait_for(lambda: not cli.leftovers(), 60, "every process of the run to exit")
    log = (exp_dir / "logs" / "learner.log").read_text()
    # 15 s of flood is thousands of bad calls: a few summary lines, no tracebacks.
    assert len(log) < 32_000, f"learner.log has {len(log)} characters"
    assert "Traceback" not in log
    assert "rejected" in log
    status = json.loads(cli.run("status", "wire", "-o", "json").stdout)
    assert status["wire_rejections"]["undecodable"] >= wire["undecodable"]
    table = cli.run("status", "wire").stdout
    print(f"flood refused: {status['wire_rejections']}; learner.log: {len(log)} characters, "
          f"{log.count(chr(10))} lines; eval return {final['eval_return']}")  # fmt: skip
    assert "rejected:" in table and "undecodable" in table
    cli.run("delete", "wire")

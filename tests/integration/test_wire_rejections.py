"""Bad input on the wire against a real, training learner started by the CLI.

Each bad call gets the right gRPC status, and the learner keeps training to the end.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

from surreal.protocol import LearnerClient, ProtocolError
from surreal.protocol.v1 import surreal_pb2 as pb
from surreal.protocol.v1 import surreal_pb2_grpc as pb_grpc

SURREAL = shutil.which("surreal", path=str(Path(sys.executable).parent))
STEPS = 40_000


def _status(env: dict[str, str]) -> dict:
    out = subprocess.run([SURREAL, "status", "wire", "-o", "json"], env=env, capture_output=True,
                         text=True, timeout=60, check=True)  # fmt: skip
    return json.loads(out.stdout)


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


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


@pytest.mark.slow
def test_rejections_do_not_disturb_training(tmp_path: Path) -> None:
    env = {**os.environ, "SURREAL_HOME": str(tmp_path)}
    subprocess.run(
        [SURREAL, "create", "wire", "--algo", "ppo", "--env", "CartPole-v1", "--agents", "2",
         "--steps", str(STEPS), "--set", "eval_episodes=2", "--detach"],
        env=env, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    exp_dir = tmp_path / "experiments" / "wire"
    try:
        program = json.loads((exp_dir / "program.json").read_text())
        learner = next(c for c in program["components"] if c["role"] == "learner")
        address = learner["env"]["SURREAL_LEARNER_ADDR"]
        token = (exp_dir / "token").read_text().strip()
        _wait(lambda: (_status(env)["env_steps"] or 0) > 0, 120, "training to start")

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

        before = _status(env)["env_steps"]
        _wait(lambda: _status(env)["env_steps"] > before, 120, "training to go on")
        final = _wait(lambda: _status(env)["phase"] in ("Succeeded", "Failed") and _status(env),
                      600, "the end of the run")  # fmt: skip
        assert final["phase"] == "Succeeded"
        assert final["env_steps"] >= STEPS
        assert all(c["restarts"] == 0 for c in final["components"])
    finally:
        subprocess.run([SURREAL, "delete", "wire"], env=env, capture_output=True, timeout=120)

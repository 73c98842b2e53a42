"""The suite's one solve of each algorithm on the local backend, the README's main job among them,
and bad input must not ruin it. Beside a real run's actors, a "rogue" worker with the experiment's
token sends well-formed fragments (PPO) or result batches (ES) full of what a broken environment or
a buggy actor produces, as fast as the learner's credits allow, for the whole run. The learner
rejects each whole, counts it by reason, names the rogue in a few log lines, and the run still
learns: bounded by env steps, like every learning test here.

The README job also takes bad calls on the wire while it trains: each gets the right gRPC status,
and a flood of random bytes (raw TCP, and as gRPC messages on every method, with and without the
token) is refused and logged in a few lines; the learner keeps training, the run ends Succeeded and
every process of it exits."""

from __future__ import annotations

import itertools
import json
import os
import random
import socket
import threading
import time
from collections.abc import Callable

import grpc
import numpy as np
import pytest
from cli_harness import Cli, ended, frozen, running, status_after, wait_for

import surreal
from surreal.protocol import LearnerClient, ProtocolError
from surreal.protocol.client import rpc
from surreal.protocol.v1 import surreal_pb2 as pb
from surreal.runtime.envs.make import EnvBatch
from surreal.runtime.es.noise import pair_seed
from surreal.runtime.evaluator import eval_seed, evaluate

pytestmark = pytest.mark.slow

# CartPole's preset: fragments of 32 steps of 4 envs; it normalizes neither observations nor rewards.
T, N = 32, 4


def ppo_fragment(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A fragment an honest CartPole actor could have sent."""
    return {
        "obs": rng.normal(0, 0.1, (T + 1, N, 4)).astype(np.float32),
        "actions": rng.integers(0, 2, (T, N)),
        "logprobs": np.full((T, N), np.log(0.5), np.float32),
        "rewards": np.ones((T, N), np.float32),
        "terminated": np.zeros((T, N), bool),
        "truncated": np.zeros((T, N), bool),
        "trunc_index": np.zeros((0, 2), np.int64),
        "trunc_obs": np.zeros((0, 4), np.float32),
        "obs_count": np.zeros(1),
        "obs_mean": np.zeros(4),
        "obs_m2": np.zeros(4),
        "ret_count": np.zeros(1),
        "ret_mean": np.zeros(1),
        "ret_m2": np.zeros(1),
        "episode_returns": np.zeros(0),
        "episode_lengths": np.zeros(0, np.int64),
    }


def _nan_obs(f):
    f["obs"][5, 1, 2] = np.nan


def _nan_logprobs(f):
    f["logprobs"][:] = np.nan


def _huge_rewards(f):
    f["rewards"][:] = 3e38


def _bad_actions(f):
    f["actions"][0, 0] = 7


def _negative_count(f):
    f["obs_count"][0] = -5.0


def _inf_return(f):
    f["episode_returns"], f["episode_lengths"] = np.array([np.inf]), np.array([10])


PPO_POISONS: tuple[Callable[[dict[str, np.ndarray]], None], ...] = (
    _nan_obs, _nan_logprobs, _huge_rewards, _bad_actions, _negative_count, _inf_return,
)  # fmt: skip


def es_batch(params, rng: np.random.Generator, kind: int) -> dict[str, np.ndarray]:
    """Results a rogue worker claims for agents no real worker hosts, with the seeds the master
    handed them (so only their values are wrong): NaN or infinite returns, or impossible moments."""
    nonce, version = int(params.extras["nonce"][0]), params.version
    agents = rng.integers(2**40, 2**41, 4)
    returns = rng.normal(0, 1, (4, 2))
    returns[:, kind % 2] = np.nan if kind % 3 else np.inf
    lengths = np.full((4, 2), 10)
    count = float(lengths.sum()) if kind % 4 else -1.0  # every 4th batch: a negative count
    return {
        "agent_id": agents, "pair": np.zeros(4, np.int64),
        "seed": np.array([pair_seed(nonce, int(a), 0) for a in agents], np.int64),
        "version": np.full(4, version, np.int64), "returns": returns, "lengths": lengths,
        "obs_count": np.array([count]), "obs_mean": np.zeros(4), "obs_m2": np.zeros(4),
    }  # fmt: skip


class Rogue:
    """A worker thread that sends `make(params, i)` up its own experience stream until the
    learner ends the stream; counts what it sent."""

    def __init__(self, address: str, token: str, make: Callable[..., dict[str, np.ndarray]]) -> None:
        self.client = LearnerClient(address, token)
        self.make, self.sent, self.error = make, 0, None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        params = None
        try:
            # Started beside `create`: it is there from the learner's first moment, so a run that
            # is over in seconds cannot end before it has sent anything.
            self.client.wait_ready(120.0)
            stream = self.client.experience("rogue")
            for i in itertools.count():
                params = self.client.get_params(params.version if params else -1) or params
                if params is None:
                    continue
                stream.send(params.version, self.make(params, i), timeout=60)
                self.sent += 1
        except (ProtocolError, TimeoutError) as e:
            self.error = e  # the run ended (the learner stopped serving)
        finally:
            self.client.close()


def _learner_address(cli: Cli, name: str) -> tuple[str, str]:
    """The learner's address and the run's token, from what `create --detach` has written."""
    exp_dir = cli.exp_dir(name)
    program = json.loads((exp_dir / "program.json").read_text())
    address = next(c for c in program["components"] if c["role"] == "learner")["env"]["SURREAL_LEARNER_ADDR"]
    return address, (exp_dir / "token").read_text().strip()


def _start_rogue(cli: Cli, name: str, make) -> Rogue:
    """A rogue for the run `create --detach` has just written (program.json and token are there
    when it returns); it waits for the learner to serve."""
    rogue = Rogue(*_learner_address(cli, name), make)
    rogue.thread.start()
    return rogue


def _rogue_lines(cli: Cli, name: str) -> list[str]:
    log = (cli.exp_dir(name) / "logs" / "learner.log").read_text()
    return [line for line in log.splitlines() if "'rogue'" in line]


# The flood goes on until the learner has refused more than FLOODED calls of each kind (thousands
# in 8 s here alone; a fresh clone's CI under load once made 33 unauthenticated ones in 8 s), at most
# FLOOD_MAX_SECONDS.
FLOODED, FLOOD_MAX_SECONDS = 50, 180.0
METHODS = ("/surreal.v1.Experience/Stream", "/surreal.v1.Parameters/Get", "/surreal.v1.Status/Get",
           "/surreal.v1.Status/ReportEval", "/grpc.health.v1.Health/Check")  # fmt: skip


def _raw_stream(address: str, token: str, fragment: pb.Fragment) -> grpc.RpcError:
    requests = [pb.ExperienceRequest(hello=pb.Hello(worker_id="bad-caller")),
                pb.ExperienceRequest(fragment=fragment)]  # fmt: skip
    with grpc.insecure_channel(address) as channel:
        call = rpc(channel, "Experience", "Stream")(
            iter(requests), metadata=(("x-surreal-token", token),), timeout=10
        )
        with pytest.raises(grpc.RpcError) as info:
            for _ in call:
                pass
    return info.value


def _grpc_garbage(address: str, token: str, stop: threading.Event, until: float, seed: int) -> None:
    rng, metadata = random.Random(seed), (("x-surreal-token", token),)
    with grpc.insecure_channel(address) as channel:
        while not stop.is_set() and time.monotonic() < until:
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


def _tcp_garbage(host: str, port: int, stop: threading.Event, until: float, seed: int) -> None:
    rng = random.Random(seed)
    while not stop.is_set() and time.monotonic() < until:
        try:
            with socket.create_connection((host, port), timeout=1) as s:
                s.sendall(os.urandom(rng.randint(1, 4000)))
        except OSError:
            pass


CONTRACT_FIELDS = {
    "name", "algo", "env", "backend", "phase", "env_steps", "updates", "policy_version", "episodes",
    "train_return", "eval_return", "steps_per_second", "elapsed_seconds", "components",
}  # fmt: skip


def _bad_calls(address: str, token: str) -> None:
    """Each bad call gets its own gRPC status."""
    for bad_token in ("", "wrong-token"):
        client = LearnerClient(address, bad_token)
        # gRPC shares a process's connections to one address: the rogue's, refused while the learner
        # started, may still be backing off, and a call without wait-for-ready fails at once there.
        client.wait_ready(30.0)
        with pytest.raises(ProtocolError) as info:
            client.get_params()
        assert info.value.code == "UNAUTHENTICATED", str(info.value)
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


def _flood(address: str, token: str, stop: threading.Event) -> None:
    """Random bytes until `stop` (at most FLOOD_MAX_SECONDS): as gRPC messages with and without the
    token, and raw TCP."""
    host, port = address.rsplit(":", 1)
    until = time.monotonic() + FLOOD_MAX_SECONDS
    flood = [
        threading.Thread(target=_grpc_garbage, args=(address, token, stop, until, 1)),
        threading.Thread(target=_grpc_garbage, args=(address, "wrong", stop, until, 2)),
        threading.Thread(target=_tcp_garbage, args=(host, int(port), stop, until, 3)),
    ]
    for t in flood:
        t.start()
    for t in flood:
        t.join()


def test_the_readme_job_learns_cartpole_beside_a_poisoning_actor_and_a_flood(cli: Cli) -> None:
    """The README's main job (PPO, CartPole-v1, 2 agents, 100k steps, seed 1) with a rogue beside
    its actors from its first env steps, and bad calls and a flood on the wire while it trains: it
    still solves CartPole. A machine that reaches half the run under the flood has its actors
    frozen (SIGSTOP) for the rest of the flood, so that the run cannot end under it."""
    rng = np.random.default_rng(0)

    def poisoned(params, i: int) -> dict[str, np.ndarray]:
        fragment = ppo_fragment(rng)
        PPO_POISONS[i % len(PPO_POISONS)](fragment)
        return fragment

    cli.run("create", "poisoned", "--algo", "ppo", "--env", "CartPole-v1", "--agents", "2",
            "--steps", "100000", "--seed", "1", "--detach", timeout=120)  # fmt: skip
    rogue = _start_rogue(cli, "poisoned", poisoned)
    address, token = _learner_address(cli, "poisoned")
    before = wait_for(lambda: running(cli, "poisoned"), 120, "training to start", poll=0.05)
    _bad_calls(address, token)
    stop = threading.Event()
    flood = threading.Thread(target=_flood, args=(address, token, stop))
    flood.start()

    def flooded(st: dict | None) -> bool:
        wire = (st or {}).get("wire_rejections") or {}
        return wire.get("undecodable", 0) > FLOODED and wire.get("unauthenticated", 0) > FLOODED

    # The flood lasts until the learner has refused enough of it, and a fast machine runs 100k steps
    # in less: the actors are frozen from half the run (or the flood's end, if first) until the flood
    # is over, so that the run cannot end under the flood.
    wait_for(lambda: flooded(st := running(cli, "poisoned")) or (st or {}).get("env_steps", 0) >= 50_000,
             FLOOD_MAX_SECONDS, "half the run, or the flood refused", poll=0.05)  # fmt: skip
    with frozen(cli, "poisoned"):
        wait_for(lambda: flooded(running(cli, "poisoned")), FLOOD_MAX_SECONDS, "the flood refused", poll=0.1)
        stop.set()
        flood.join()
        # A status written after the flood and the freeze: the learner's own file (`surreal status`
        # takes seconds).
        status_after(cli, "poisoned", time.time())
        during = running(cli, "poisoned")
    assert during is not None and during["env_steps"] > before["env_steps"], (before, during)
    wire = during["wire_rejections"]
    assert wire["undecodable"] > FLOODED and wire["unauthenticated"] > FLOODED, wire

    final = wait_for(lambda: ended(cli, "poisoned"), 600, "the end of the run", poll=0.5)
    rogue.thread.join(timeout=60)
    rejected = final["rejected_fragments"]
    named = len(_rogue_lines(cli, "poisoned"))
    log = (cli.exp_dir("poisoned") / "logs" / "learner.log").read_text()
    print(f"rogue sent {rogue.sent} fragments ({rogue.error}); rejected {rejected}; eval return "
          f"{final['eval_return']}; {named} log lines name the rogue; flood refused: "
          f"{final['wire_rejections']}; learner.log: {len(log)} characters")  # fmt: skip
    assert final["phase"] == "Succeeded", final
    assert final["eval_return"] >= 475, final
    assert CONTRACT_FIELDS <= final.keys()
    assert (final["name"], final["algo"], final["env"], final["backend"]) == (
        "poisoned", "ppo", "CartPole-v1", "local",
    )  # fmt: skip
    # The run stops at the first fragment boundary past 100,000 steps.
    assert 100_000 <= final["env_steps"] < 100_000 + 2 * 4 * 32 * 2, final
    assert final["updates"] > 0 and final["policy_version"] > 0 and final["episodes"] > 0
    assert sorted(c["role"] for c in final["components"]) == ["actor", "actor", "evaluator", "learner"]
    assert all(c["restarts"] == 0 and c["state"] == "Succeeded" for c in final["components"]), final
    # Counted while training; after it the learner drops whatever arrives without looking.
    assert sum(rejected.values()) >= 60, rejected
    for reason in ("non_finite", "out_of_range", "bad_action", "bad_moments"):
        assert rejected[reason] > 0, rejected
    assert final["skipped_updates"] == 0
    assert final["wire_rejections"]["undecodable"] >= wire["undecodable"]
    # Named at a bounded rate: the first rejection, then a summary per 10 s at most.
    lines = _rogue_lines(cli, "poisoned")
    assert 1 <= len(lines) <= final["elapsed_seconds"] / 10 + 3, lines
    # Thousands of bad calls: a few summary lines, no tracebacks.
    assert len(log) < 32_000, f"learner.log has {len(log)} characters"
    assert "Traceback" not in log and "rejected" in log
    table = cli.run("status", "poisoned").stdout
    assert "rejected:" in table and "undecodable" in table, table
    # What it trained, in Python: the final checkpoint's policy, on the evaluator's seeded episodes,
    # scores what the run reported.
    policy = surreal.load_policy(cli.exp_dir("poisoned"))
    assert (policy.version, policy.env_steps) == (final["policy_version"], final["env_steps"]), final
    cfg = policy.spec.config
    envs = EnvBatch(policy.env, cfg.eval_episodes, seed=eval_seed(1), training=False)
    assert evaluate(envs, policy.act).mean_return == final["eval_return"]
    envs.close()
    cli.run("delete", "poisoned")
    # Every process of the run is gone (the learner used to hang in its server's stop).
    wait_for(lambda: not cli.leftovers(), 60, "every process of the run to exit")


def test_es_drops_non_finite_results_and_impossible_moments_and_still_learns(cli: Cli) -> None:
    rng = np.random.default_rng(1)
    cli.run("create", "es-poisoned", "--algo", "es", "--env", "CartPole-v1", "--agents", "8",
            "--steps", "400000", "--seed", "1", "--detach", timeout=120)  # fmt: skip
    rogue = _start_rogue(cli, "es-poisoned", lambda params, i: es_batch(params, rng, i))
    final = wait_for(lambda: ended(cli, "es-poisoned"), 600, "the end of the run", poll=0.5)
    rogue.thread.join(timeout=60)
    rejected = final["results_rejected"]
    print(f"rogue sent {rogue.sent} batches ({rogue.error}); rejected {rejected}; eval return "
          f"{final['eval_return']}")  # fmt: skip
    assert final["phase"] == "Succeeded", final
    assert rejected["nan"] > 0 and rejected["bad_moments"] > 0, rejected
    assert final["skipped_updates"] == 0
    assert final["agents_reporting"] == 8  # the rogue's made-up agents never counted
    assert final["eval_return"] >= 475, final
    cli.run("delete", "es-poisoned")

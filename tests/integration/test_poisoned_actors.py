"""The suite's one solve of each algorithm on the local backend, the README's main job among them,
and one bad actor must not ruin it. Beside a real run's actors, a "rogue" worker with the
experiment's token sends well-formed fragments (PPO) or result batches (ES) full of what a broken
environment or a buggy actor produces, as fast as the learner's credits allow, for the whole run.
The learner rejects each whole, counts it by reason, names the rogue in a few log lines, and the
run still learns: bounded by env steps, like every learning test here."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable

import numpy as np
import pytest
from cli_harness import Cli, ended, wait_for

from surreal.algorithms.es.noise import pair_seed
from surreal.protocol import LearnerClient, ProtocolError

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


def _start_rogue(cli: Cli, name: str, make) -> Rogue:
    """A rogue for the run `create --detach` has just written (program.json and token are there
    when it returns); it waits for the learner to serve."""
    exp_dir = cli.exp_dir(name)
    program = json.loads((exp_dir / "program.json").read_text())
    address = next(c for c in program["components"] if c["role"] == "learner")["env"]["SURREAL_LEARNER_ADDR"]
    rogue = Rogue(address, (exp_dir / "token").read_text().strip(), make)
    rogue.thread.start()
    return rogue


def _rogue_lines(cli: Cli, name: str) -> list[str]:
    log = (cli.exp_dir(name) / "logs" / "learner.log").read_text()
    return [line for line in log.splitlines() if "'rogue'" in line]


CONTRACT_FIELDS = {
    "name", "algo", "env", "backend", "phase", "env_steps", "updates", "policy_version", "episodes",
    "train_return", "eval_return", "steps_per_second", "elapsed_seconds", "components",
}  # fmt: skip


def test_the_readme_job_learns_cartpole_beside_a_poisoning_actor(cli: Cli) -> None:
    """The README's main job (PPO, CartPole-v1, 2 agents, 100k steps, seed 1) with a rogue beside
    its actors from its first env steps: it still solves CartPole."""
    rng = np.random.default_rng(0)

    def poisoned(params, i: int) -> dict[str, np.ndarray]:
        fragment = ppo_fragment(rng)
        PPO_POISONS[i % len(PPO_POISONS)](fragment)
        return fragment

    cli.run("create", "poisoned", "--algo", "ppo", "--env", "CartPole-v1", "--agents", "2",
            "--steps", "100000", "--seed", "1", "--detach", timeout=120)  # fmt: skip
    rogue = _start_rogue(cli, "poisoned", poisoned)
    final = wait_for(lambda: ended(cli, "poisoned"), 600, "the end of the run", poll=0.5)
    rogue.thread.join(timeout=60)
    rejected = final["rejected_fragments"]
    named = len(_rogue_lines(cli, "poisoned"))
    print(f"rogue sent {rogue.sent} fragments ({rogue.error}); rejected {rejected}; eval return "
          f"{final['eval_return']}; {named} log lines name the rogue")  # fmt: skip
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
    # Named at a bounded rate: the first rejection, then a summary per 10 s at most.
    lines = _rogue_lines(cli, "poisoned")
    assert 1 <= len(lines) <= final["elapsed_seconds"] / 10 + 3, lines
    cli.run("delete", "poisoned")


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

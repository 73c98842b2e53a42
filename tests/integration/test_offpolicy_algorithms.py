"""TD3, DQN and the algorithms with a network of their own (examples/ln_dqn.py, examples/ln_ppo.py)
through the installed `surreal`, end to end on the local backend, the off-policy ones from two
replay shards: the run succeeds (with the replay ratio held), its checkpoint's policy loads
(`load_policy`) and acts in the environment's action space, and `surreal record` films it; the
coefficient ln_dqn adapts survives its learner's SIGKILL. That each learns is proven in the serial
harness, bounded by env steps (tests/algorithms/offpolicy/test_learning.py,
tests/surreal/test_own_algorithm.py); faults, preemption and scale of the off-policy runtime are
proven once, with SAC (test_sac.py)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from cli_harness import RUN_TIMEOUT, Cli, frozen, running, status_after, wait_for

from surreal import load_policy
from surreal.runtime.checkpoint import Envelope, load_checkpoint

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

SHARDS = ("--replay-shards", "2")
RUNS = {
    "td3": ("--algo", "td3", "--env", "Pendulum-v1", "--steps", "3000", "--set", "hidden_sizes=[32,32]",
            "--set", "learning_starts=500", "--set", "random_steps=500", "--set", "replay_ratio=64", *SHARDS),
    "dqn": ("--algo", "dqn", "--env", "CartPole-v1", "--steps", "6000", "--set", "hidden_sizes=[32,32]",
            *SHARDS),
    "ln": ("--algo", "examples.ln_dqn:LayerNormDQN", "--env", "CartPole-v1", "--steps", "4000",
           "--set", "hidden_sizes=[32]", "--set", "replay_ratio=8", *SHARDS),
    "lnppo": ("--algo", "examples.ln_ppo:LayerNormPPO", "--env", "CartPole-v1", "--steps", "4096",
              "--set", "hidden_sizes=[32]"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(RUNS))
def test_it_runs_from_two_shards_and_its_policy_loads_and_films(
    cli: Cli, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli.env["PYTHONPATH"] = str(ROOT)  # where `surreal create` finds examples/, as a user's shell would
    cli.run("create", name, *RUNS[name], "--agents", "2", "--seed", "0", "--set", "eval_episodes=2",
            timeout=RUN_TIMEOUT)  # fmt: skip
    st = cli.status(name)
    assert st["phase"] == "Succeeded" and st["updates"] > 0 and st["skipped_updates"] == 0, st
    assert 0 <= st["actor_wait_share"] <= 1, st  # what the actors said to the learner or the shards
    if SHARDS[0] in RUNS[name]:
        shards = st["replay"]["shards"]
        assert len(shards) == 2 and all(s["inserted"] > 0 for s in shards), shards
        assert st["replay"]["refused_fragments"] == 0 and st["replay"]["lost"] == 0, st["replay"]
    else:  # fragments the learner refused, as an actor's policy path that disagreed would send
        assert not any(st["rejected_fragments"].values()), st

    monkeypatch.setenv("SURREAL_HOME", str(cli.home))
    monkeypatch.syspath_prepend(str(ROOT))
    policy = load_policy(name)
    env = policy.make_env()
    obs, _ = env.reset(seed=0)
    assert env.action_space.contains(policy.act(obs)), policy.act(obs)
    env.close()
    video = tmp_path / f"{name}.gif"
    cli.run("record", name, "-o", str(video), "--episodes", "1", timeout=120.0)
    assert video.stat().st_size > 0


def own_state(cli: Cli, name: str) -> tuple[int, float]:
    """The updates and the adapted coefficient (td_scale) in the learner's last checkpoint."""
    saved = load_checkpoint(cli.exp_dir(name) / "checkpoints")
    assert saved is not None
    envelope, state = Envelope.open(saved)
    return int(envelope.counters["updates"]), float(state["model"]["td_scale"])


def test_an_algorithms_own_state_is_the_same_after_a_learner_sigkill(cli: Cli) -> None:
    """ln_dqn's running scale of its TD errors is a buffer of its module. With the actors frozen the
    replay's limiter soon lets the learner no further update; it is SIGKILLed there and comes back
    from its last checkpoint; SIGTERMed then, the checkpoint it saves holds the same updates and
    the same coefficient as the one it resumed from, not the 1.0 a fresh module starts with. The run
    is long (200k steps) and held by the freeze: it cannot end while the faults go in."""
    cli.env["PYTHONPATH"] = str(ROOT)
    cli.run("create", "own", "--algo", "examples.ln_dqn:LayerNormDQN", "--env", "CartPole-v1",
            "--steps", "200000", "--agents", "1", "--seed", "0", "--set", "hidden_sizes=[32]",
            "--set", "checkpoint_every=25", "--detach", timeout=30.0)  # fmt: skip
    wait_for(lambda: running(cli, "own", min_updates=200), 180.0, "200 updates")
    reads: list[int] = []

    def updates_held() -> dict[str, Any] | None:
        """The learner's status once two of its writes in a row show the same updates."""
        reads.append(status_after(cli, "own", time.time())["updates"])
        return {"updates": reads[-1]} if len(reads) > 1 and reads[-1] == reads[-2] else None

    with frozen(cli, "own"):
        wait_for(updates_held, 120.0, "the learner's updates held by the replay's limiter", poll=0.0)
        os.kill(cli.component("own", "learner")["pid"], signal.SIGKILL)
        wait_for(lambda: cli.component("own", "learner")["restarts"] == 1, 60.0, "the learner replaced")
        log = cli.exp_dir("own") / "logs" / "learner.log"
        wait_for(lambda: "resumed from checkpoint" in log.read_text(), 60.0, "the learner resumed")
        resumed = own_state(cli, "own")
        assert resumed[0] > 0 and resumed[1] != 1.0, resumed
        os.kill(cli.component("own", "learner")["pid"], signal.SIGTERM)
        wait_for(lambda: cli.component("own", "learner")["restarts"] == 2, 60.0, "the learner replaced again")
        assert own_state(cli, "own") == resumed
    cli.run("delete", "own")

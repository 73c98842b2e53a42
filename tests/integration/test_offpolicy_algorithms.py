"""TD3, DQN and an algorithm with a network of its own (examples/ln_dqn.py) through the installed
`surreal`, end to end on the local backend, each from two replay shards: the run succeeds with the
replay ratio held, its checkpoint's policy loads (`load_policy`) and acts in the environment's
action space, and `surreal record` films it. That each learns is proven in the serial harness,
bounded by env steps (tests/algorithms/offpolicy/test_learning.py); faults, preemption and scale
of the off-policy runtime are proven once, with SAC (test_sac.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_harness import RUN_TIMEOUT, Cli

from surreal import load_policy

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

RUNS = {
    "td3": ("--algo", "td3", "--env", "Pendulum-v1", "--steps", "3000", "--set", "hidden_sizes=[32,32]",
            "--set", "learning_starts=500", "--set", "random_steps=500", "--set", "replay_ratio=64"),
    "dqn": ("--algo", "dqn", "--env", "CartPole-v1", "--steps", "6000", "--set", "hidden_sizes=[32,32]"),
    "ln": ("--algo", "examples.ln_dqn:LayerNormDQN", "--env", "CartPole-v1", "--steps", "4000",
           "--set", "hidden_sizes=[32]", "--set", "replay_ratio=8"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(RUNS))
def test_it_runs_from_two_shards_and_its_policy_loads_and_films(
    cli: Cli, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli.env["PYTHONPATH"] = str(ROOT)  # where `surreal create` finds examples/, as a user's shell would
    cli.run("create", name, *RUNS[name], "--agents", "2", "--replay-shards", "2", "--seed", "0",
            "--set", "eval_episodes=2", timeout=RUN_TIMEOUT)  # fmt: skip
    st = cli.status(name)
    assert st["phase"] == "Succeeded" and st["updates"] > 0 and st["skipped_updates"] == 0, st
    shards = st["replay"]["shards"]
    assert len(shards) == 2 and all(s["inserted"] > 0 for s in shards), shards
    assert st["replay"]["refused_fragments"] == 0 and st["replay"]["lost"] == 0, st["replay"]

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

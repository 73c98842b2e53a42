"""Bad input through the installed `surreal` command: one line on stderr, non-zero exit, nothing created."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

# The command installed beside this interpreter, as a user would run it.
SURREAL = shutil.which("surreal", path=str(Path(sys.executable).parent))


def run(home: Path, *args: str, **env_vars: str) -> subprocess.CompletedProcess[str]:
    assert SURREAL, "the surreal command is not installed"
    env = {**os.environ, "SURREAL_HOME": str(home), **env_vars}
    return subprocess.run([SURREAL, *args], capture_output=True, text=True, env=env, timeout=120)


def created(home: Path) -> list[str]:
    root = home / "experiments"
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


@pytest.fixture
def yaml_file(tmp_path: Path) -> Path:
    path = tmp_path / "broken.yaml"
    path.write_text("agents: [1, 2\n")
    return path


CASES = [
    (["create", "e1", "--algo", "nope"], "unknown algorithm 'nope'"),
    (["create", "e1", "--algo", "ppo", "--env", "NoSuchEnv-v9"], "NoSuchEnv-v9"),
    (["create", "e1", "--algo", "ppo", "--set", "no_such=1"], "unknown setting 'no_such'"),
    (["create", "e1", "--algo", "ppo", "--set", "epochs=many"], "ppo.epochs: expected an integer"),
    (["create", "e1", "--algo", "ppo", "--agents", "0"], "agents must be a positive integer"),
    (["create", "e1", "--algo", "ppo", "--agents", "-2"], "agents must be a positive integer"),
    (["create", "e1", "--algo", "ppo", "--agents", "two"], "'two' is not a valid integer"),
    (["create", "E_1", "--algo", "ppo"], "invalid experiment name 'E_1'"),
    (["create", "e1", "--algo", "ppo", "--set", "=3"], "expected KEY=VALUE"),
    (["create", "e1", "--algo", "ppo", "--learners", "0"], "learners must be an integer from 1 to 64, got 0"),
    (["create", "e1", "--algo", "ppo", "--agents", "2", "--learners", "3"],
     "every learner rank needs an agent of its own, and there are 2"),
    (["create", "e1", "--algo", "es", "--learners", "2"], "es trains with one learner"),
    (["create", "e1", "--algo", "ppo", "--learners", "65", "--agents", "65"],
     "learners must be an integer from 1 to 64, got 65"),
    (["create", "e1", "--algo", "ppo", "--agents", "10", "--agents-per-pod", "4", "--backend", "kube",
      "--dry-run"], "agents (10) must be a multiple of agents_per_pod (4) on Kubernetes"),
    (["create", "e1", "--algo", "ppo", "--agents", "4", "--learners", "3", "--backend", "kube",
      "--set", "agents_per_pod=2", "--dry-run"],
     "3 learner ranks need an actor pod each, and there would be 2"),
    (["create", "e1", "--algo", "ppo", "--agents", "4", "--learners", "4", "--learner-pods", "3",
      "--backend", "kube", "--dry-run"],
     "learner_pods 3: the 4 learner ranks must spread evenly over the learner pods"),
    (["create", "e1", "--algo", "ppo", "--agents", "4", "--learners", "2", "--learner-pods", "4",
      "--backend", "kube", "--dry-run"],
     "learner_pods 4: the 2 learner ranks must spread evenly"),
    (["create", "e1", "--algo", "ppo", "--agents", "4", "--learners", "2", "--learner-pods", "2"],
     "learner pods are containers' or a cluster's (--backend containers or kube)"),
    # A fragment over the protocol's 64 MiB message limit, which the learner would refuse at every
    # try: 20 Breakout envs x 129 rows x 4 stacked 84x84 frames.
    (["create", "e1", "--algo", "ppo", "--env", "ALE/Breakout-v5", "--set", "envs_per_agent=20"],
     "a worker of 1 agent would send fragments of 70 MiB, over the 64 MiB message limit"),
    # Off-policy: the replay's shards and what SAC can act on.
    (["create", "e1", "--algo", "ppo", "--replay-shards", "2"], "replay_shards 2: ppo learns on-policy"),
    (["create", "e1", "--algo", "sac", "--env", "Pendulum-v1", "--replay-shards", "0"],
     "replay_shards must be an integer from 1 to 64, got 0"),
    (["create", "e1", "--algo", "sac", "--env", "CartPole-v1"], "sac needs one Box of continuous actions"),
    (["create", "e1", "--algo", "td3", "--env", "CartPole-v1"],
     "td3 needs one Box of continuous actions; CartPole-v1's are a Discrete"),
    (["create", "e1", "--algo", "dqn", "--env", "Pendulum-v1"],
     "dqn needs one Discrete of actions; Pendulum-v1's are a Box"),
    (["create", "e1", "--algo", "sac", "--env", "Pendulum-v1", "--set", "replay_ratio=0"],
     "sac.replay_ratio must be >= 0.001"),
    (["create", "e1", "--algo", "sac", "--env", "Pendulum-v1", "--set", "learning_starts=10",
      "--set", "buffer_size=5"], "sac.learning_starts must be at most buffer_size (5)"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "message"), CASES)
def test_bad_create_is_one_line_and_creates_nothing(tmp_path: Path, args: list[str], message: str) -> None:
    home = tmp_path / "home"
    result = run(home, *args)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert message in lines[0]
    assert "Traceback" not in result.stderr
    assert created(home) == []


def test_malformed_yaml(tmp_path: Path, yaml_file: Path) -> None:
    home = tmp_path / "home"
    result = run(home, "create", "e1", "--algo", "ppo", "--config", str(yaml_file))
    assert result.returncode != 0
    assert result.stderr.strip().count("\n") == 0
    assert "malformed YAML" in result.stderr and "broken.yaml" in result.stderr
    assert created(home) == []


def test_existing_name_is_refused_and_left_intact(tmp_path: Path) -> None:
    from surreal.orchestrator.local import experiment as experiments
    from surreal.spec import build_spec

    home = tmp_path / "home"
    exp_dir, _ = experiments.prepare(build_spec("taken", flags={"algo": "ppo"}), home)
    before = {p.name: p.read_bytes() for p in exp_dir.iterdir() if p.is_file()}
    result = run(home, "create", "taken", "--algo", "ppo", "--env", "Pendulum-v1")
    assert result.returncode != 0
    assert result.stderr.strip().count("\n") == 0
    assert "experiment 'taken' already exists" in result.stderr
    assert {p.name: p.read_bytes() for p in exp_dir.iterdir() if p.is_file()} == before
    assert created(home) == ["taken"]


@pytest.mark.parametrize(("value", "message"), [("fast", "must be a number"), ("250", "between 0 and 100")])
def test_bad_time_slice_setting_is_refused_before_anything_is_created(
    tmp_path: Path, value: str, message: str
) -> None:
    home = tmp_path / "home"
    result = run(home, "create", "e1", "--algo", "ppo", SURREAL_SCHED_SLICE_MS=value)
    assert result.returncode != 0
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert "SURREAL_SCHED_SLICE_MS" in result.stderr and message in result.stderr
    assert created(home) == []


@pytest.mark.parametrize("command", [["status", "ghost"], ["logs", "ghost"], ["delete", "ghost"]])
def test_unknown_experiment(tmp_path: Path, command: list[str]) -> None:
    result = run(tmp_path / "home", *command)
    assert result.returncode != 0
    assert result.stderr.strip() == (
        f"surreal: error: no experiment named 'ghost' in {tmp_path / 'home' / 'experiments'}"
    )


def test_dry_run_prints_the_validated_spec_and_creates_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    result = run(
        home, "create", "e1", "--algo", "ppo", "--env", "Pendulum-v1", "--dry-run", "--set", "epochs=3"
    )
    assert result.returncode == 0, result.stderr
    assert "env: Pendulum-v1" in result.stdout and "epochs: 3" in result.stdout
    assert created(home) == []


def test_a_taken_tensorboard_port_is_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "experiments" / "tb1" / "tb").mkdir(parents=True)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run(home, "tensorboard", "tb1", "--port", str(port))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"surreal: error: port {port} on 127.0.0.1 is taken (pick another with --port)"
    ]


@pytest.mark.parametrize("backend", ["containers", "local"])
def test_placement_flags_need_the_kube_backend(tmp_path: Path, backend: str) -> None:
    result = run(
        tmp_path / "home", "create", "p1", "--algo", "ppo", "--backend", backend, "--provider", "gke"
    )
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "surreal: error: --pools and --provider place pods on a cluster: they need --backend kube"
    ]
    assert created(tmp_path / "home") == []

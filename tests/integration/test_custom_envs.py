"""A researcher's own environment through the installed command: from the module's folder (the
working directory is carried to every component) or from PYTHONPATH, with kwargs; a pixel
environment that a CNN policy solves (the suite's one solve of the CNN path); and environments that
fail in a run, named as the run's problem. Bounded by env steps, never by seconds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cli_harness import SURREAL

from surreal import load_policy
from surreal.runtime.envs.make import BROKEN_STEPS

ENVS = Path(__file__).resolve().parents[1] / "envs"
# CueWorld's eval return with Tuple actions after 16k steps (random 12.5, optimal 32): 10 runs of
# the test below on the 2-core machine (22-28 s each, beside another training), min 30.59, median
# 30.64; the bar sits halfway from random to that.
BAR = 21.0
pytestmark = pytest.mark.slow


def surreal(*args: str, home: Path, cwd: Path, pythonpath: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SURREAL_HOME": str(home), "PYTHONPATH": pythonpath}
    return subprocess.run([str(SURREAL), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=900, stdin=subprocess.DEVNULL)  # fmt: skip


def test_a_module_in_the_working_directory_runs_with_its_kwargs(tmp_path: Path) -> None:
    """A short run: what it proves is where the module is found and that the kwargs travel
    (learning is proven once per path elsewhere)."""
    project, home = tmp_path / "lab", tmp_path / "home"
    project.mkdir()
    # The user's module under a name of their own: it registers LineWorld-v0 on import.
    shutil.copy(ENVS / "line_world.py", project / "lab_envs.py")
    run = surreal("create", "lw", "--algo", "ppo", "--env", "lab_envs:LineWorld-v0", "--steps", "4000",
                  "--seed", "0", "--set", "env_kwargs.size=12", "--set", "env_kwargs.max_steps=20",
                  home=home, cwd=project)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    status = json.loads(surreal("status", "lw", "-o", "json", home=home, cwd=tmp_path).stdout)
    assert status["phase"] == "Succeeded" and status["env"] == "lab_envs:LineWorld-v0"
    assert status["env_steps"] >= 4000 and status["eval_return"] is not None, status
    # Episodes end only at max_steps (LineWorld never terminates): 20 steps each, not the default 50.
    assert status["episodes"] * 20 <= status["env_steps"] < (status["episodes"] + 64) * 20, status
    exp = home / "experiments" / "lw"
    assert "env_kwargs:\n  size: 12\n  max_steps: 20\n" in (exp / "spec.yaml").read_text()
    program = json.loads((exp / "program.json").read_text())
    paths = {c["env"]["SURREAL_IMPORT_PATH"] for c in program["components"]}
    assert paths == {str(project.resolve())}


def test_a_pixel_environment_class_on_pythonpath_is_solved_by_a_cnn(tmp_path: Path) -> None:
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = surreal("create", "px", "--algo", "ppo", "--env", "pixel_target:PixelTarget", "--steps", "20000",
                  "--seed", "0", "--set", "env_kwargs.size=20", home=home, cwd=elsewhere,
                  pythonpath=str(ENVS))  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    status = json.loads(surreal("status", "px", "-o", "json", home=home, cwd=elsewhere).stdout)
    # A random policy scores 4 of 16; the square's place is in the pixels alone.
    assert status["phase"] == "Succeeded" and status["eval_return"] >= 15.0, status
    logs = "".join(p.read_text() for p in (home / "experiments" / "px" / "logs").glob("*.log"))
    assert "Traceback" not in logs and "Warning" not in logs


def test_a_dict_environment_learns_from_the_keys_it_is_given_and_its_policy_is_in_hand(
    tmp_path: Path,
) -> None:
    """CueWorld (tests/envs/cue_world.py): a Dict of a discrete cue (the one leaf that pays), an
    image, a vector, bits and a Text note, and actions a Tuple of every kind (a Discrete from 1, a
    Dict of a MultiDiscrete and a MultiBinary, a Box (2, 2)). Without obs_keys, create refuses the
    note by name and creates nothing; with them, actors, learner and evaluator run the leaves end
    to end (each on the wire in its own dtype, the image through the mixed network's CNN, the
    actions as rows of categorical and Gaussian columns) and it learns: a random policy scores
    12.5 of 32 (BAR above). Its policy loads in Python and gives the environment's own actions;
    `record` says in one line that the environment cannot render."""
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = "cue_world:CueWorld-v0"
    refused = surreal(
        "create", "cue", "--algo", "ppo", "--env", env, home=home, cwd=elsewhere, pythonpath=str(ENVS)
    )
    assert refused.returncode == 2 and refused.stderr.splitlines() == [
        f"surreal: error: {env}: observation key 'note' is a Text, which no network here can encode: leave "
        "it out with --set obs_keys=bits,cue,frame,noise (or a wrapper that encodes it)"
    ], refused.stderr
    assert not (home / "experiments" / "cue").exists()
    run = surreal("create", "cue", "--algo", "ppo", "--env", env, "--steps", "16000", "--seed", "0",
                  "--set", "obs_keys=bits,cue,frame,noise", "--set", "env_kwargs.actions=tuple",
                  home=home, cwd=elsewhere, pythonpath=str(ENVS))  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    status = json.loads(surreal("status", "cue", "-o", "json", home=home, cwd=elsewhere).stdout)
    print(f"eval return {status['eval_return']}, rejected {status['rejected_fragments']}")
    assert status["phase"] == "Succeeded" and status["eval_return"] >= BAR, status
    assert not any(status["rejected_fragments"].values()), status
    logs = "".join(p.read_text() for p in (home / "experiments" / "cue" / "logs").glob("*.log"))
    assert "Traceback" not in logs
    policy = load_policy(home / "experiments" / "cue")
    assert policy.version == status["policy_version"] and policy.spec.config.obs_keys == (
        "bits",
        "cue",
        "frame",
        "noise",
    )
    made = policy.make_env()
    obs, _ = made.reset(seed=0)
    actions = policy.act([obs, obs])
    assert len(actions) == 2 and all(made.action_space.contains(a) for a in actions), actions
    made.close()
    played = surreal("record", str(home / "experiments" / "cue"), "-o", "cue.gif", home=home, cwd=elsewhere,
                     pythonpath=str(ENVS))  # fmt: skip
    assert played.returncode == 1 and len(played.stderr.splitlines()) == 2, (
        played.stderr
    )  # the header line, then why
    assert "cannot render frames" in played.stderr and not (elsewhere / "cue.gif").exists()


def test_an_environment_that_raises_or_gives_only_nan_in_a_run_fails_it_with_its_reason(
    tmp_path: Path,
) -> None:
    """hostile:Flaky passes create's probe (a reset and one step) and breaks from its second step on:
    it raises, or gives NaN observations (each episode then ends at once, rejected, and after
    BROKEN_STEPS such steps of its whole batch in a row the actor gives up). Either way the actor's
    role fails for good (exit 73, a fatal exit): the run ends Failed at once, far from its target,
    with the environment's own reason as its problem. Two runs side by side, each a few seconds."""
    home = tmp_path / "home"
    env = {**os.environ, "SURREAL_HOME": str(home), "PYTHONPATH": str(ENVS)}
    runs = {
        fail: subprocess.Popen(
            [
                str(SURREAL),
                "create",
                f"flaky-{fail}",
                "--algo",
                "ppo",
                "--env",
                "hostile:Flaky",
                "--agents",
                "1",
                "--steps",
                "1000000",
                "--seed",
                "0",
                "--set",
                f"env_kwargs.fail={fail}",
            ],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for fail in ("raise", "nan")
    }
    reasons = {
        "raise": "environment 'hostile:Flaky': step failed: ValueError: boom at step 2",
        "nan": f"gave a non-finite observation or reward at each of {BROKEN_STEPS} steps in a row: "
        "nothing but rejected data",
    }
    for fail, proc in runs.items():
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 1, err[-3000:]
        status = json.loads(surreal("status", f"flaky-{fail}", "-o", "json", home=home, cwd=tmp_path).stdout)
        assert status["phase"] == "Failed" and status["env_steps"] < 100_000, status
        assert status["problem"].startswith(
            "no actor is left to feed the learner: actor-0 failed (exit code 73: "
        ), status
        assert reasons[fail] in status["problem"], status
        logs = home / "experiments" / f"flaky-{fail}" / "logs"
        assert reasons[fail] in (logs / "actor-0.log").read_text()
        assert "bug in surreal" not in "".join(p.read_text() for p in logs.glob("*.log"))


# SAC on CueWorld's leaves with Box actions after 6k steps (blind 4.0, optimal 8.0): halfway from
# blind to the lowest of 10 seeds (7.60), see the test.
SAC_BAR = 6.0


def test_sac_learns_from_a_dict_of_leaves_and_its_policy_is_in_hand(tmp_path: Path) -> None:
    """SAC from replay on CueWorld's Dict (a Discrete from 10, a float vector, bits; Box actions
    paying 0.5 a step to any policy blind to the cue, 1 to the optimal): actors insert each leaf in
    its own dtype, the shard checks each, the learner packs the sample (the cue one-hot) and it
    learns the cue. 6k steps at ratio 256; seeds 0-9 of this command (two at a time, beside a
    HalfCheetah benchmark, 61-87 s each): min 7.603, median 7.619; bar SAC_BAR. The image
    leaf's CNN path is proven in tests/runtime/offpolicy/test_obs.py (a CNN per network is 4x
    the update's cost: docs/algorithms/sac.md)."""
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    elsewhere.mkdir()
    sets = ("obs_keys=bits,cue,noise", "env_kwargs.actions=box", "max_episode_steps=8",
            "hidden_sizes=[64,64]", "replay_ratio=256", "learning_rate=0.001")  # fmt: skip
    run = surreal("create", "cue", "--algo", "sac", "--env", "cue_world:CueWorld-v0", "--steps", "6000",
                  "--seed", "0", *(a for s in sets for a in ("--set", s)), home=home, cwd=elsewhere,
                  pythonpath=str(ENVS))  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    status = json.loads(surreal("status", "cue", "-o", "json", home=home, cwd=elsewhere).stdout)
    print(f"eval return {status['eval_return']}")
    assert status["phase"] == "Succeeded" and status["eval_return"] >= SAC_BAR, status
    assert status["replay"]["refused_fragments"] == 0, status["replay"]
    policy = load_policy(home / "experiments" / "cue")
    made = policy.make_env()
    obs, _ = made.reset(seed=0)
    actions = policy.act([obs, obs])
    assert len(actions) == 2 and all(made.action_space.contains(a) for a in actions), actions
    made.close()

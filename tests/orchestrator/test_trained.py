"""`surreal.load_policy` and `surreal record` on experiment folders made here: a spec as `create`
writes it and the checkpoint a learner writes at its start (its initial weights), so the policy is
compared with what the actors and the evaluator run from the same weights."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import surreal
from surreal.algorithms.common import obs_leaves
from surreal.algorithms.common.env_ref import extend_import_path
from surreal.algorithms.common.envs import spaces_of
from surreal.algorithms.es.evaluator import deterministic_policy
from surreal.algorithms.es.master import ESMaster
from surreal.algorithms.ppo.learner import PPOLearner
from surreal.algorithms.ppo.policy import policy_from_params, policy_input
from surreal.orchestrator.home import ExperimentError
from surreal.orchestrator.trained import record
from surreal.spec import ExperimentSpec, build_spec

SURREAL = str(Path(sys.executable).parent / "surreal")


def experiment(home: Path, name: str, algo: str, env: str, **sets: str) -> tuple[Path, ExperimentSpec, Any]:
    """HOME/experiments/NAME with spec.yaml and a learner's first checkpoint; the learner too."""
    spec = build_spec(name, flags={"algo": algo, "env": env, "agents": 2}, overrides=sets)
    exp_dir = home / "experiments" / name
    exp_dir.mkdir(parents=True)
    (exp_dir / "spec.yaml").write_text(spec.to_yaml())
    assert spec.resolved is not None
    spaces = spaces_of(spec.resolved)
    if algo == "ppo":
        learner: Any = PPOLearner(spec.config, spaces, spec.steps, seed=3, exp_dir=exp_dir)
    else:
        learner = ESMaster(spec.config, spaces, spec.steps, 2, seed=3, exp_dir=exp_dir)
    assert (exp_dir / "checkpoints" / "latest.pt").is_file()
    return exp_dir, spec, learner


def test_a_ppo_policy_acts_as_the_evaluator_on_one_observation_or_a_batch(tmp_path: Path) -> None:
    """Pendulum: Box actions (clipped to [-2, 2]) and observation normalization, from a checkpoint
    whose statistics are not the identity."""
    exp_dir, spec, learner = experiment(
        tmp_path, "pend", "ppo", "Pendulum-v1", norm_obs="true", log_std_init="1.0"
    )
    assert isinstance(learner, PPOLearner)
    learner.obs_rms.update(np.random.default_rng(0).normal(3.0, 2.0, (500, 3)))
    learner.save()
    policy = surreal.load_policy("pend", home=tmp_path)
    assert (policy.version, policy.env.name, policy.spec.algo) == (
        learner.counters.version,
        "Pendulum-v1",
        "ppo",
    )

    obs = np.random.default_rng(1).normal(3.0, 2.0, (16, 3)).astype(np.float32)
    net, norm = policy_from_params(spec.config, spaces_of(spec.resolved), learner.params())
    assert norm is not None
    expected = np.clip(net.act(norm(obs), deterministic=True)[0], -2.0, 2.0)
    np.testing.assert_allclose(policy.act(obs), expected, rtol=1e-6)
    np.testing.assert_allclose(policy.act(obs[3]), expected[3], rtol=1e-6)  # one observation
    assert policy.act(obs[3]).shape == (1,)
    sampled = policy.act(obs, deterministic=False)
    assert sampled.shape == (16, 1) and np.abs(sampled).max() <= 2.0 and not np.allclose(sampled, expected)
    # The folder and the checkpoint file name the same policy.
    for where in (exp_dir, exp_dir / "checkpoints", exp_dir / "checkpoints" / "latest.pt", str(exp_dir)):
        np.testing.assert_allclose(surreal.load_policy(where).act(obs), expected, rtol=1e-6)
    with pytest.raises(ValueError, match=r"an observation of shape \(4,\): Pendulum-v1 gives \(3,\)"):
        policy.act(np.zeros(4))


# A user's module whose *function* builds the environment (`--env module:function`): channels-last
# uint8 frames, as gymnasium's pixel environments give them.
HWC_MODULE = """
import gymnasium as gym
import numpy as np


class Frames(gym.Env):
    def __init__(self, size):
        self.observation_space = gym.spaces.Box(0, 255, (size, size, 3), np.uint8)
        self.action_space = gym.spaces.Discrete(4)

    def _obs(self):
        return self.np_random.integers(0, 256, self.observation_space.shape, dtype=np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action):
        return self._obs(), 0.0, False, False, {}


def make_frames(size=12):
    return Frames(size)
"""


def test_a_cnn_policy_takes_the_environment_s_channels_last_frames(tmp_path: Path) -> None:
    """Images as the environment gives them (channels last): the policy transposes them as the
    actors' EnvBatch does, and acts as the evaluator on the batch's rows. The environment comes
    from a user's function (`module:function`) with its kwargs."""
    (tmp_path / "hwc_frames.py").write_text(HWC_MODULE)
    extend_import_path([str(tmp_path)])
    _, spec, learner = experiment(
        tmp_path, "pix", "ppo", "hwc_frames:make_frames", **{"env_kwargs.size": "12"}
    )
    assert isinstance(learner, PPOLearner) and spec.resolved is not None
    assert spec.resolved.image_shape == (3, 12, 12)
    policy = surreal.load_policy("pix", home=tmp_path)
    raw = np.random.default_rng(4).integers(0, 256, (5, 12, 12, 3), dtype=np.uint8)
    rows = np.ascontiguousarray(np.moveaxis(raw, -1, 1))  # [5, C, H, W]
    net, _ = policy_from_params(spec.config, spaces_of(spec.resolved), learner.params())
    expected = net.act(rows, deterministic=True)[0]
    np.testing.assert_array_equal(policy.act(raw), expected)
    assert policy.act(raw[2]) == expected[2]


def test_a_policy_of_dict_observations_takes_one_of_them_or_a_list(tmp_path: Path) -> None:
    """CueWorld (tests/envs/cue_world.py): a Dict of every leaf kind; the policy observes the keys
    the run kept (`obs_keys`) and leaves the Text one alone."""
    extend_import_path([str(Path(__file__).resolve().parents[1] / "envs")])
    _, spec, learner = experiment(
        tmp_path, "cue", "ppo", "cue_world:CueWorld-v0", obs_keys="bits,cue,frame,noise"
    )
    policy = surreal.load_policy("cue", home=tmp_path)
    env = policy.make_env()
    raw = [env.reset(seed=i)[0] for i in range(4)]
    env.close()
    spaces = spaces_of(spec.resolved).keep(spec.config.obs_keys)
    rows = obs_leaves.empty(spaces.obs_leaves, 4)
    for i, o in enumerate(raw):
        obs_leaves.put(spaces.obs_leaves, rows, i, o)
    net, norm = policy_from_params(spec.config, spaces, learner.params())
    expected = net.act(policy_input(spaces, norm, rows), deterministic=True)[0]
    np.testing.assert_array_equal(policy.act(raw), expected)
    assert policy.act(raw[1]) == expected[1]
    with pytest.raises(
        ValueError, match=r"not an observation of cue_world:CueWorld-v0 \(bits \(binary 2\), cue"
    ):
        policy.act({"cue": 10})


def test_an_es_policy_is_its_unperturbed_parameters(tmp_path: Path) -> None:
    _, spec, master = experiment(tmp_path, "es1", "es", "CartPole-v1")
    assert isinstance(master, ESMaster)
    policy = surreal.load_policy("es1", home=tmp_path)
    obs = np.random.default_rng(2).normal(0, 1, (8, 4)).astype(np.float32)
    expected = deterministic_policy(spec.config, spaces_of(spec.resolved), master.params())(obs)
    np.testing.assert_array_equal(policy.act(obs), expected)
    np.testing.assert_array_equal(policy.act(obs, deterministic=False), expected)  # nothing to sample


def test_what_is_not_a_policy_is_one_line(tmp_path: Path) -> None:
    exp_dir, _, _ = experiment(tmp_path, "c1", "ppo", "CartPole-v1")
    with pytest.raises(ExperimentError, match="no experiment named 'nope'"):
        surreal.load_policy("nope", home=tmp_path)
    with pytest.raises(ExperimentError, match="is neither an experiment folder"):
        surreal.load_policy(tmp_path)
    bad = exp_dir / "checkpoints" / "copy.pt"
    bad.write_text("not a checkpoint")
    with pytest.raises(ExperimentError, match="copy.pt is not a checkpoint surreal wrote"):
        surreal.load_policy(bad)
    (exp_dir / "checkpoints" / "latest.pt").unlink()
    with pytest.raises(
        ExperimentError, match=r"has no checkpoint at .* \(its learner has not written one yet\)"
    ):
        surreal.load_policy("c1", home=tmp_path)


def test_record_writes_every_frame_of_every_episode(tmp_path: Path) -> None:
    """CartPole's first policy: short episodes, one frame per step and one of each reset. A GIF (Pillow)
    and an mp4 (imageio-ffmpeg's encoder) hold them; nothing else is left beside them."""
    experiment(tmp_path, "rec", "ppo", "CartPole-v1")
    (tmp_path / "out").mkdir()
    policy = surreal.load_policy("rec", home=tmp_path)
    ended: list[int] = []
    gif = record(policy, tmp_path / "out" / "a.gif", episodes=2, progress=lambda n, e: ended.append(n))
    assert ended == [1, 2] and gif.size == (600, 400)
    frames = sum(e.frames for e in gif.episodes)
    assert frames == sum(1 + e.ret for e in gif.episodes)  # CartPole: reward 1 a step
    with Image.open(gif.path) as image:
        assert image.size == (400, 267)  # GIFs are kept small
        durations = []
        for i in range(image.n_frames):  # Pillow merges repeated frames, adding their durations
            image.seek(i)
            durations.append(image.info["duration"])
        assert sum(durations) == frames * 20  # CartPole renders at 50 fps
    mp4 = record(policy, tmp_path / "out" / "a.mp4", episodes=2)
    assert mp4.bytes > 1000 and mp4.path.read_bytes()[4:8] == b"ftyp"
    assert [e.ret for e in mp4.episodes] == [e.ret for e in gif.episodes]  # the same seeded episodes
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.gif", "a.mp4"]


def test_surreal_record_on_the_command_line(tmp_path: Path) -> None:
    experiment(tmp_path, "cl", "ppo", "CartPole-v1")
    env = {"SURREAL_HOME": str(tmp_path), "PATH": str(Path(sys.executable).parent)}
    out = tmp_path / "agent.gif"
    proc = subprocess.run([SURREAL, "record", "cl", "-o", str(out), "--episodes", "1"], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("cl: ppo on CartPole-v1, version 0 (0 env steps); recording 1 episode"), lines
    assert lines[1].startswith("episode 1/1: return "), lines
    assert len(lines) == 2, lines  # nothing from pygame or SDL
    assert proc.stdout.startswith(f"{out}: ") and " frames of 600x400, 1 episode (" in proc.stdout
    assert out.is_file()
    for args, message in (
        (["nope", "-o", "x.gif"], "surreal: error: no experiment named 'nope'"),
        (
            ["cl", "-o", str(tmp_path / "x.avi")],
            f"surreal: error: {tmp_path / 'x.avi'}: write a .mp4 or a .gif",
        ),
        (
            ["cl", "-o", str(tmp_path / "no" / "x.gif")],
            f"surreal: error: no folder {tmp_path / 'no'} to write",
        ),
    ):
        bad = subprocess.run([SURREAL, "record", *args], env=env, capture_output=True, text=True, timeout=120)
        assert bad.returncode != 0 and bad.stderr.startswith(message) and len(bad.stderr.splitlines()) == 1
    assert not (tmp_path / "x.avi").exists()

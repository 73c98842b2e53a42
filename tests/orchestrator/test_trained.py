"""`surreal.load_policy` and `surreal record` on experiment folders made here: a spec as `create`
writes it and the checkpoint a learner writes at its start (its initial weights), so the policy is
compared with what the actors and the evaluator run from the same weights."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import torch
from cli_world import surreal as cli
from PIL import Image, ImageSequence

import surreal
from surreal.algorithms.ppo import PPO
from surreal.orchestrator import trained
from surreal.orchestrator.home import ExperimentError
from surreal.orchestrator.trained import Refused, record
from surreal.runtime.checkpoint import LATEST
from surreal.runtime.envs import obs_leaves
from surreal.runtime.envs.make import spaces_of
from surreal.runtime.envs.ref import extend_import_path
from surreal.runtime.es.evaluator import deterministic_policy
from surreal.runtime.es.master import ESMaster
from surreal.runtime.normalization import batch_moments
from surreal.runtime.onpolicy.learner import Learner
from surreal.runtime.onpolicy.policy import policy_from_params, policy_input
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
        learner: Any = Learner(PPO(), spec.config, spaces, spec.steps, seed=3, exp_dir=exp_dir)
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
    assert isinstance(learner, Learner)
    learner.obs_rms.merge(batch_moments(np.random.default_rng(0).normal(3.0, 2.0, (500, 3))))
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
    assert isinstance(learner, Learner) and spec.resolved is not None
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
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent.gif", "experiments"]


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_record_refuses_what_it_cannot_write_or_play_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each bad input: exit code 2 (1 for a file that is not a checkpoint), one short line that says
    why and blames neither surreal nor the checkpoint for the input, and nothing made."""
    exp_dir, _, _ = experiment(tmp_path, "bad", "ppo", "CartPole-v1")
    monkeypatch.setenv("SURREAL_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder.gif").mkdir()
    junk = exp_dir / "checkpoints" / "junk.pt"
    junk.write_bytes(np.random.default_rng(0).bytes(4096))
    long = "a" * 300
    bad = "Invalid value for"
    cases = [
        ("bad -o folder.gif", 2, f"{bad} '-o' / '--output': File 'folder.gif' is a directory."),
        (f"bad -o {tmp_path}", 2, f"{bad} '-o' / '--output': File '{tmp_path}' is a directory."),
        ("bad -o x.gif --seed -1", 2, f"{bad} '--seed': -1 is not in the range 0<=x<=4294967295."),
        (f"bad -o x.gif --seed {2**32}", 2, f"{bad} '--seed': 4294967296 is not in the range 0<=x<="),
        ("bad -o x.gif --episodes 1001", 2, f"{bad} '--episodes': 1001 is not in the range 1<=x<=1000."),
        ("bad -o x.gif --fps 0", 2, f"{bad} '--fps': 0.0 is not in the range 0<x<=1000."),
        ("bad -o x.avi", 2, "x.avi: write a .mp4 or a .gif"),
        ("bad -o no/x.gif", 2, "no folder no to write x.gif in"),
        (f"bad -o {long}.gif", 2, f"cannot write {long}.gif: File name too long"),
        (f"{'a/' * 10_000} -o x.gif", 2, f"{'a/' * 30}... (20,000 characters) is longer than any name"),
        ("nope -o x.gif", 1, f"no experiment named 'nope' in {tmp_path / 'experiments'}"),
        (f"{junk} -o x.gif", 1, f"{junk} is not a checkpoint surreal wrote (UnpicklingError: Weights"),
    ]  # fmt: skip
    before = tree(tmp_path)
    for args, code, message in cases:
        got, out, err = cli(capsys, "record", *args.split())
        assert (got, out) == (code, ""), (args, err)
        assert err.startswith(f"surreal: error: {message}") and len(err.splitlines()) == 1, (args, err)
        assert len(err) < 500 and "weights_only" not in err and "bug in surreal" not in err, err
    assert tree(tmp_path) == before


def test_load_policy_says_what_it_takes(tmp_path: Path) -> None:
    """What is not a name, a folder or a checkpoint of surreal's: one line each, the seed's range
    checked before the checkpoint is blamed, torch's warnings and advice kept from the user."""
    exp_dir, _, _ = experiment(tmp_path, "lp", "ppo", "CartPole-v1")
    takes = "load_policy takes an experiment's name, its folder or a checkpoint file"
    for where in (None, b"lp", 3):
        with pytest.raises(
            TypeError, match=f"^{takes} \\(a str or a pathlib.Path\\), not {type(where).__name__}$"
        ):
            surreal.load_policy(where, home=tmp_path)  # type: ignore[arg-type]
    for seed in (-1, 2**32):
        with pytest.raises(
            Refused, match=rf"^seed must be an integer in \[0, 4294967295\] \(as a spec's\), got {seed}$"
        ):
            surreal.load_policy("lp", home=tmp_path, seed=seed)
    with pytest.raises(
        Refused, match=r"^x{60}\.\.\. \(100,000 characters\) is longer than any name or path$"
    ):
        surreal.load_policy("x" * 100_000, home=tmp_path)
    with pytest.raises(ExperimentError, match=r"^cannot read .*/x{300}: File name too long$"):
        surreal.load_policy(tmp_path / ("x" * 300))
    ckpts = exp_dir / "checkpoints"
    torch.save({"weight": torch.zeros(2)}, ckpts / "foreign.pt")  # someone else's state_dict
    torch.save(torch.zeros(2), ckpts / "tensor.pt")
    (ckpts / "junk.pt").write_bytes(np.random.default_rng(0).bytes(4096))
    for name, message in (
        ("foreign.pt", "does not hold a ppo policy for CartPole-v1: KeyError: 'counters'"),
        ("tensor.pt", "is not a checkpoint surreal wrote (it holds a Tensor)"),
        ("junk.pt", "is not a checkpoint surreal wrote (UnpicklingError: Weights only load failed)"),
    ):
        with warnings.catch_warnings(), pytest.raises(ExperimentError) as refused:
            warnings.simplefilter("error")
            surreal.load_policy(ckpts / name)
        assert str(refused.value) == f"{ckpts / name} {message}"
    assert surreal.load_policy(ckpts / LATEST, seed=2**32 - 1).version == 0


def test_a_recording_stops_when_its_file_is_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A GIF keeps its frames until it is written: it stops at GIF_MAX_BYTES of them, and says so in
    one line pointing to .mp4; an .mp4 streams its frames, and stops at MP4_MAX_FRAMES."""
    experiment(tmp_path, "full", "ppo", "CartPole-v1")
    monkeypatch.setenv("SURREAL_HOME", str(tmp_path))
    monkeypatch.setattr(trained, "GIF_MAX_BYTES", 3 * 400 * 267)  # three of CartPole's frames, scaled
    monkeypatch.setattr(trained, "MP4_MAX_FRAMES", 5)
    gif = tmp_path / "a.gif"
    code, out, err = cli(capsys, "record", "full", "-o", str(gif), "--episodes", "1000")
    assert code == 0, err
    stopped = (
        f"{gif}: stopped at 3 frames, as many as a GIF holds (0.3204 MB of frames): write a .mp4 for more"
    )
    assert err.splitlines()[1:] == [stopped]
    assert out.startswith(f"{gif}: 3 frames of 600x400, 0 episodes (none ended), ")
    with Image.open(gif) as image:
        assert sum(frame.info["duration"] for frame in ImageSequence.Iterator(image)) == 3 * 20  # 50 fps
    policy = surreal.load_policy("full", home=tmp_path)
    mp4 = record(policy, tmp_path / "a.mp4", episodes=1000)
    assert (mp4.frames, mp4.stopped) == (5, "stopped at 5 frames, as many as a .mp4 holds here (5 frames)")
    assert mp4.path.read_bytes()[4:8] == b"ftyp"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.gif", "a.mp4", "experiments"]


def test_an_interrupted_recording_leaves_no_file_and_no_encoder(tmp_path: Path) -> None:
    """Ctrl-C (or the CLI's SIGTERM) while ffmpeg writes: the encoder is killed, its file removed."""
    experiment(tmp_path, "intr", "ppo", "CartPole-v1")
    policy = surreal.load_policy("intr", home=tmp_path)
    (tmp_path / "out").mkdir()
    seen: list[Path] = []

    def interrupt(done: int, _episode: object) -> None:
        seen.extend((tmp_path / "out").iterdir())
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        record(policy, tmp_path / "out" / "a.mp4", episodes=5, progress=interrupt)
    assert [p.name for p in seen] == [".a.mp4.partial.mp4"]  # ffmpeg was writing it
    assert list((tmp_path / "out").iterdir()) == []
    assert not [p for p in psutil.Process().children() if "ffmpeg" in p.name()], "ffmpeg is left running"


@pytest.mark.parametrize(
    ("sig", "suffix"), [(signal.SIGTERM, ".gif"), (signal.SIGINT, ".mp4")], ids=["term", "int"]
)
def test_surreal_record_stops_on_a_signal_within_a_second(tmp_path: Path, sig: int, suffix: str) -> None:
    """A recording of the most episodes it takes, stopped while it writes frames: the error line
    within a second of the signal, exit code 130, nothing left where the video would be."""
    experiment(tmp_path, "sig", "ppo", "CartPole-v1")
    out = tmp_path / "out"
    out.mkdir()
    env = {"SURREAL_HOME": str(tmp_path), "PATH": str(Path(sys.executable).parent)}
    # Ctrl-C as a terminal's user has it: a suite started in the background (`make test &`) ignores
    # SIGINT, and a child that inherits SIG_IGN gets no KeyboardInterrupt from Python.
    proc = subprocess.Popen([SURREAL, "record", "sig", "-o", str(out / f"a{suffix}"), "--episodes", "1000"],
                            env=env, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    lines: queue.Queue[tuple[float, str]] = queue.Queue()
    assert proc.stderr is not None
    stderr = proc.stderr

    def pump() -> None:
        for line in stderr:
            lines.put((time.monotonic(), line))
        lines.put((time.monotonic(), ""))  # the end

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        seen = [lines.get(timeout=120)[1]]
        while not seen[-1].startswith("episode 2/"):  # it writes frames
            assert seen[-1], seen  # not ended
            seen.append(lines.get(timeout=60)[1])
        if suffix == ".mp4":
            assert [p.name for p in out.iterdir()] == [".a.mp4.partial.mp4"]  # ffmpeg writes it
        signalled = time.monotonic()
        os.kill(proc.pid, sig)
        code = proc.wait(timeout=10)
        exited = time.monotonic() - signalled
    finally:
        proc.kill()
    reader.join(timeout=10)
    rest = [lines.get_nowait() for _ in range(lines.qsize())]
    errors = [(t - signalled, line) for t, line in rest if line.startswith("surreal: error:")]
    assert code == 130 and [line for _, line in errors] == ["surreal: error: interrupted\n"], rest
    assert errors[0][0] < 1.0 and exited < 3.0, (errors, exited)
    assert all(line.startswith("episode ") for _, line in rest[:-2]) and rest[-1][1] == "", rest
    assert list(out.iterdir()) == []

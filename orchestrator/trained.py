"""What a run trained, in your hands: `surreal.load_policy` and `surreal record`.

The spec says which algorithm, environment and settings made a policy; the learner's last
checkpoint (`checkpoints/latest.pt`) holds its weights and the observation statistics it was
trained with. Local and containers experiments keep their checkpoints here; a Kubernetes
experiment keeps its own on its volume in the cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Generator
from contextlib import closing
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from surreal.algorithms.registry import get_algorithm
from surreal.orchestrator.home import (
    SPEC_FILE,
    ExperimentError,
    existing_dir,
    home_dir,
    load_spec,
    read_spec,
    user_import_path,
)
from surreal.runtime.checkpoint import LATEST, Envelope, error_line, load_checkpoint_file
from surreal.runtime.envs import obs_leaves
from surreal.runtime.envs.make import make_env, obs_layout, shaped_obs, spaces_of
from surreal.runtime.envs.ref import IMPORT_PATH_VAR, EnvRef, extend_import_path
from surreal.spec import MAX_SEED, ExperimentSpec

CHECKPOINTS = "checkpoints"
PATH_MAX = 4096  # Linux's: a longer name, folder or file is none of them


class Refused(ExperimentError):
    """A path or a value `load_policy` or `record` cannot take (exit code 2): nothing is made."""

    exit_code = 2


def _check_length(text: str) -> None:
    """So that every path an error line names is bounded."""
    if len(text) > PATH_MAX:
        raise Refused(f"{text[:60]}... ({len(text):,} characters) is longer than any name or path")


def _check_seed(seed: int) -> None:
    if not (isinstance(seed, int | np.integer) and 0 <= seed <= MAX_SEED):
        raise Refused(f"seed must be an integer in [0, {MAX_SEED}] (as a spec's), got {str(seed)[:40]}")


def _experiment_dir(where: str | os.PathLike[str], home: Path | None) -> tuple[Path, Path]:
    """(the experiment's folder, its checkpoint file) for a name, a folder or a checkpoint file."""
    text = os.fspath(where)
    path = Path(text).expanduser()
    if isinstance(where, os.PathLike) or os.sep in text or text.endswith(".pt") or path.exists():
        if path.is_file():
            exp_dir = path.parent.parent if path.parent.name == CHECKPOINTS else path.parent
            return exp_dir, path
        if path.name == CHECKPOINTS:
            path = path.parent
        if not (path / SPEC_FILE).is_file():
            raise ExperimentError(f"{path} is neither an experiment folder (no {SPEC_FILE}) nor a checkpoint")
        return path, path / CHECKPOINTS / LATEST
    exp_dir = existing_dir(home or home_dir(), text)
    return exp_dir, exp_dir / CHECKPOINTS / LATEST


def load_policy(where: str | os.PathLike[str], *, home: Path | None = None, seed: int = 0) -> TrainedPolicy:
    """The policy a run trained: `where` is an experiment's name (in `home`, default $SURREAL_HOME),
    its folder, or a checkpoint file in its `checkpoints/` folder. `seed` seeds sampling
    (`act(..., deterministic=False)`). Raises ExperimentError (a ValueError's sibling, with one
    line that says why) when there is no such experiment, no checkpoint, or a file that is not one;
    Refused (one too, exit code 2 in the CLI) for a seed out of range or a path longer than any."""
    text = os.fspath(where) if isinstance(where, str | os.PathLike) else None
    if not isinstance(text, str):
        raise TypeError("load_policy takes an experiment's name, its folder or a checkpoint file (a str "
                        f"or a pathlib.Path), not {type(where).__name__[:60]}")  # fmt: skip
    _check_length(text)
    _check_seed(seed)
    try:
        return _load_policy(where, home, seed)
    except OSError as exc:  # a name too long for the file system, a folder it may not read
        raise ExperimentError(f"cannot read {text}: {exc.strerror or error_line(exc)}") from None


def _load_policy(where: str | os.PathLike[str], home: Path | None, seed: int) -> TrainedPolicy:
    exp_dir, checkpoint = _experiment_dir(where, home)
    spec_path = exp_dir / SPEC_FILE
    if not spec_path.is_file():
        raise ExperimentError(f"no {SPEC_FILE} at {spec_path}: the checkpoint's experiment cannot be told")
    # A user's module: where the run's components imported it from, then where this shell would.
    extend_import_path([*_run_import_path(checkpoint), *user_import_path()])
    data = read_spec(exp_dir)
    try:  # an algorithm module that is not importable here is not a corrupt spec file
        get_algorithm(data["algo"])
    except ValueError as exc:
        raise ExperimentError(f"experiment {data['name']!r}: {exc}") from None
    spec = load_spec(exp_dir)
    if not checkpoint.is_file():
        where_kept = (
            "its checkpoints are on its volume in the cluster: copy its folder (spec.yaml, checkpoints/) here"
            if spec.backend == "kube"
            else "its learner has not written one yet"
        )
        raise ExperimentError(f"experiment {spec.name!r} has no checkpoint at {checkpoint} ({where_kept})")
    try:
        saved = load_checkpoint_file(checkpoint)
    except ValueError as exc:  # one line that names the file
        raise ExperimentError(str(exc)) from None
    return TrainedPolicy(spec, saved, checkpoint, seed)


def _run_import_path(checkpoint: Path) -> list[str]:
    """The folders the run's components imported from (program.json's SURREAL_IMPORT_PATH)."""
    for exp_dir in (checkpoint.parent.parent, checkpoint.parent):
        try:
            program = json.loads((exp_dir / "program.json").read_text())
            paths = {c["env"].get(IMPORT_PATH_VAR, "") for c in program["components"]}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        return [p for path in sorted(paths) for p in path.split(os.pathsep) if p]
    return []


class TrainedPolicy:
    """A run's policy at its last checkpoint (`load_policy`): `act` on raw observations, and the
    environment it was trained on (`make_env`), made as the run's evaluator made it."""

    def __init__(self, spec: ExperimentSpec, saved: dict[str, Any], checkpoint: Path, seed: int = 0) -> None:
        assert spec.resolved is not None, "a spec written by create carries its resolved environment"
        self.spec, self.checkpoint = spec, checkpoint
        algorithm = get_algorithm(spec.algo)
        try:  # a torch file of someone else's: no envelope, or other weights
            envelope, state = Envelope.open(saved)
            self.version = int(envelope.counters.get("version", 0))
            self.env_steps = int(envelope.counters.get("env_steps", 0))
            # The run's last evaluation, as its status says it (the learner's last checkpoint holds it).
            self.eval_return, self.eval_stderr = envelope.eval_return, envelope.eval_stderr
            self.eval_episodes = envelope.eval_episodes
            self._act = algorithm.checkpoint_policy(spec.config, spec.resolved, state, seed)
        except (KeyError, ValueError, TypeError, AttributeError, RuntimeError) as exc:
            what = f"a {spec.algo} policy for {spec.env}"
            raise ExperimentError(f"{checkpoint} does not hold {what}: {error_line(exc)}") from None
        self.spaces = spaces_of(spec.resolved).keep(getattr(spec.config, "obs_keys", ()), spec.env)
        probe = self.make_env()
        try:
            self.observation_space, self.action_space = probe.observation_space, probe.action_space
            self.metadata: dict[str, Any] = dict(probe.metadata or {})  # render_modes, render_fps
        finally:
            probe.close()
        self._layout = obs_layout(self.observation_space) if not self.spaces.structured else ""
        self._raw_shape = tuple(self.observation_space.shape or ())

    @property
    def env(self) -> EnvRef:
        """The environment (and its kwargs) the run trained on."""
        return self.spec.env_ref

    def make_env(self, *, render_mode: str | None = None, seed: int = 0) -> gym.Env:
        """The run's environment as its evaluator made it (Atari's evaluation preprocessing, the
        spec's env_kwargs), seeded; `render_mode` as gymnasium takes it ("rgb_array")."""
        ref = self.env
        if render_mode is not None:
            ref = EnvRef(ref.name, {**ref.kwargs, "render_mode": render_mode})
        return make_env(ref, seed, training=False)

    def act(self, obs: Any, deterministic: bool = True) -> Any:
        """The actions for one observation (shaped as the environment gives it) or for a batch of
        them ([N, *shape]; of Dict or Tuple observations, a list of them): the mode of the policy,
        or a sample (`deterministic=False`). Discrete actions are int64, Box actions float32
        clipped to the action bounds; other action spaces' (MultiDiscrete, Dict, ...) as the
        environment's `step` takes them, a list of them for a batch."""
        if self.spaces.structured:
            return self._act_leaves(obs, deterministic)
        x = np.asarray(obs)
        single = x.shape == self._raw_shape
        if not single and x.shape[1:] != self._raw_shape:
            raise ValueError(
                f"an observation of shape {x.shape}: {self.env} gives {self._raw_shape}, a batch is "
                f"[N, {', '.join(map(str, self._raw_shape))}]"
            )
        batch = x[None] if single else x
        rows = np.empty((len(batch), *self.spaces.obs_shape), self.spaces.obs_dtype)
        for i, o in enumerate(batch):
            rows[i] = shaped_obs(self._layout, o)
        return self._actions(rows, deterministic, single)

    def _act_leaves(self, obs: Any, deterministic: bool) -> Any:
        batch = obs if isinstance(obs, list) else [obs]
        rows = obs_leaves.empty(self.spaces.obs_leaves, len(batch))
        try:
            for i, o in enumerate(batch):
                obs_leaves.put(self.spaces.obs_leaves, rows, i, o)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            leaves = obs_leaves.summary(self.spaces.obs_leaves)
            raise ValueError(f"not an observation of {self.env} ({leaves}), nor a list of them: "
                             f"{type(exc).__name__}: {exc}") from None  # fmt: skip
        return self._actions(rows, deterministic, single=not isinstance(obs, list))

    def _actions(self, rows: Any, deterministic: bool, single: bool) -> Any:
        actions = self._act(rows, deterministic)
        if self.spaces.structured_actions:
            layout = self.spaces.action_layout
            made = [layout.to_env(self.action_space, row) for row in actions]
            return made[0] if single else made
        if not self.spaces.discrete:
            actions = np.clip(actions, self.spaces.action_low, self.spaces.action_high)
        return actions[0] if single else actions


@dataclass(frozen=True)
class Episode:
    ret: float
    frames: int


def play(
    policy: TrainedPolicy, episodes: int, *, seed: int = 0, deterministic: bool = True
) -> Generator[tuple[np.ndarray | None, Episode | None], None, None]:
    """Frames of `episodes` episodes of `policy` on its environment rendered as RGB: (frame, None)
    for each frame, then (None, the episode) at each episode's end."""
    # pygame (gymnasium's classic-control renderer) starts SDL: no window, no sound, no banner, and
    # no signal handlers of its own (SDL's would swallow SIGINT and SIGTERM: nothing would stop it).
    for name, value in (("SDL_VIDEODRIVER", "dummy"), ("SDL_AUDIODRIVER", "dummy"),
                        ("PYGAME_HIDE_SUPPORT_PROMPT", "1"), ("SDL_NO_SIGNAL_HANDLERS", "1")):  # fmt: skip
        os.environ.setdefault(name, value)
    try:
        env = policy.make_env(render_mode="rgb_array", seed=seed)
    except ValueError as exc:
        raise ExperimentError(f"cannot make {policy.env} to render it: {error_line(exc)}") from None
    try:
        for _ in range(episodes):
            obs, _info = env.reset()
            ret, frames, done = 0.0, 1, False
            yield _rendered(env), None
            while not done:
                obs, reward, terminated, truncated, _info = env.step(policy.act(obs, deterministic))
                ret += float(reward)
                done = bool(terminated or truncated)
                frames += 1
                yield _rendered(env), None
            yield None, Episode(ret, frames)
    finally:
        env.close()


def _rendered(env: gym.Env) -> np.ndarray:
    name = env.spec.id if env.spec else str(env)
    try:
        frame = env.render()
    except Exception as exc:  # a renderer's missing library (pygame, an OpenGL context), as one line
        raise ExperimentError(f"{name} cannot render frames: {error_line(exc)}") from None
    if not (isinstance(frame, np.ndarray) and frame.ndim == 3 and frame.shape[2] in (3, 4)):
        raise ExperimentError(
            f"{name} cannot render frames: render() gave {type(frame).__name__}"
            f"{getattr(frame, 'shape', '')}, not an RGB image (render_mode='rgb_array')"
        )
    return np.ascontiguousarray(frame[:, :, :3], np.uint8)


GIF_MAX_WIDTH = 400  # a GIF holds every frame in memory as it is written: a quick look, kept small
# Pillow's GIF writer needs every frame at once, and about as much again while it writes them: a GIF
# stops at this many bytes of frames (a byte a pixel; 1,872 frames of CartPole's, 37 s at 50 fps).
GIF_MAX_BYTES = 200_000_000
# An .mp4 streams its frames to ffmpeg (memory stays flat), but its file and its time grow: it stops
# at a million frames (9 hours at 30 fps), in case an episode never ends.
MP4_MAX_FRAMES = 1_000_000


class _Gif:
    """Frames kept as palette images (a byte a pixel, at most GIF_MAX_WIDTH wide, GIF_MAX_BYTES in
    all), written at close by Pillow."""

    def __init__(self, path: Path, fps: float) -> None:
        self.path, self.duration = path, max(20, round(1000 / fps))  # ms; 20 ms at least
        self.frames: list[Any] = []
        self.room = GIF_MAX_BYTES
        self.limit = f"as many as a GIF holds ({GIF_MAX_BYTES / 1e6:g} MB of frames): write a .mp4 for more"

    def add(self, frame: np.ndarray) -> bool:
        """Keep `frame`; False (not kept) when the GIF is full."""
        from PIL import Image

        image = Image.fromarray(frame)
        if image.width > GIF_MAX_WIDTH:
            image = image.resize((GIF_MAX_WIDTH, round(image.height * GIF_MAX_WIDTH / image.width)))
        self.room -= image.width * image.height
        if self.room < 0:
            return False
        self.frames.append(image.quantize(colors=256, method=Image.Quantize.FASTOCTREE))
        return True

    def close(self) -> None:
        if self.frames:
            self.frames[0].save(self.path, save_all=True, append_images=self.frames[1:],
                                duration=self.duration, loop=0)  # fmt: skip

    def abort(self) -> None:
        self.frames.clear()


class _Mp4:
    """H.264 by the ffmpeg binary imageio-ffmpeg ships in its wheel, fed each frame as it comes."""

    def __init__(self, path: Path, fps: float) -> None:
        try:
            import imageio_ffmpeg
        except ImportError:
            raise ExperimentError(
                "an .mp4 needs imageio-ffmpeg (it ships the encoder): pip install 'surreal[video]', or "
                "write a .gif"
            ) from None
        self.ffmpeg, self.path, self.fps = imageio_ffmpeg.get_ffmpeg_exe(), path, fps
        self.room, self.limit = MP4_MAX_FRAMES, f"as many as a .mp4 holds here ({MP4_MAX_FRAMES:,} frames)"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = tempfile.TemporaryFile()  # ffmpeg's complaint, read if it fails

    def add(self, frame: np.ndarray) -> bool:
        """Send `frame` to ffmpeg; False (not sent) when the video is full."""
        self.room -= 1
        if self.room < 0:
            return False
        if self._proc is None:
            h, w = frame.shape[:2]
            # yuv420p (what players expect) needs even sizes: padded by a pixel; crf 15: good quality.
            self._proc = subprocess.Popen(
                [self.ffmpeg, "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{w}x{h}",
                 "-r", str(Fraction(self.fps).limit_denominator(1001)), "-i", "-", "-an",
                 "-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2", "-c:v", "libx264", "-pix_fmt", "yuv420p",
                 "-crf", "15", str(self.path)],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self._log,
            )  # fmt: skip
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(frame.tobytes())
        except BrokenPipeError:
            self.close()  # raises with ffmpeg's reason
        return True

    def close(self) -> None:
        if self._proc is None:
            return
        self._proc.communicate()  # the end of its input: it finishes the file
        if self._proc.returncode:
            self._log.seek(0)
            said = self._log.read(2000).decode(errors="replace").strip().splitlines() or ["no reason given"]
            raise ExperimentError(f"ffmpeg could not write the video: {said[0][:200]}")

    def abort(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()


VIDEO_SUFFIXES = (".mp4", ".gif")


@dataclass(frozen=True)
class Recording:
    path: Path
    episodes: list[Episode]  # those that ended
    frames: int
    size: tuple[int, int]  # (width, height) of the frames rendered
    seconds: float
    bytes: int
    stopped: str | None = None  # why it stopped before the episodes ended (the file was full)


def check_output(path: Path) -> None:
    """Refuse (Refused, before anything is played) a video `record` cannot write: not a .mp4 or a
    .gif, a folder, in no folder, or a name the file system will not take."""
    _check_length(str(path))
    try:
        if path.suffix.lower() not in VIDEO_SUFFIXES:
            raise Refused(f"{path}: write a .mp4 or a .gif")
        if path.is_dir():
            raise Refused(f"{path} is a folder: name the video in it, e.g. {path / 'agent.mp4'}")
        if not path.parent.is_dir():
            raise Refused(f"no folder {path.parent} to write {path.name} in")
        _partial(path).touch()
        _partial(path).unlink()
    except OSError as exc:
        raise Refused(f"cannot write {path}: {exc.strerror or error_line(exc)}") from None


def _partial(path: Path) -> Path:
    return path.with_name(f".{path.name}.partial{path.suffix}")


def record(
    policy: TrainedPolicy,
    path: Path,
    *,
    episodes: int = 3,
    seed: int = 0,
    deterministic: bool = True,
    fps: float | None = None,
    progress: Callable[[int, Episode], None] | None = None,
) -> Recording:
    """Render `episodes` episodes of `policy` into `path` (.mp4 or .gif); `progress` is called at
    the end of each episode. A GIF stops at GIF_MAX_BYTES of frames, an .mp4 at MP4_MAX_FRAMES
    (`stopped` says so). Nothing is left at `path` when it fails or is interrupted."""
    check_output(path)
    _check_seed(seed)
    if episodes < 1:
        raise Refused(f"episodes must be at least 1, got {episodes}")
    metadata = policy.metadata
    if "rgb_array" not in (metadata.get("render_modes") or ()):
        raise ExperimentError(f"{policy.env} cannot render frames: its render_modes are "
                              f"{list(metadata.get('render_modes') or [])}, without 'rgb_array'")  # fmt: skip
    rate = float(fps or metadata.get("render_fps") or 30)
    started = time.monotonic()
    partial = _partial(path)
    writer: _Gif | _Mp4 = _Gif(partial, rate) if path.suffix.lower() == ".gif" else _Mp4(partial, rate)
    done: list[Episode] = []
    frames, size, stopped = 0, (0, 0), None
    try:
        with closing(play(policy, episodes, seed=seed, deterministic=deterministic)) as playing:
            for frame, episode in playing:
                if frame is not None:
                    if not writer.add(frame):
                        stopped = f"stopped at {frames:,} frames, {writer.limit}"
                        break
                    frames, size = frames + 1, (frame.shape[1], frame.shape[0])
                elif episode is not None:
                    done.append(episode)
                    if progress is not None:
                        progress(len(done), episode)
        try:
            writer.close()
            os.replace(partial, path)
        except OSError as exc:  # a full disk
            raise ExperimentError(f"cannot write {path}: {exc.strerror or error_line(exc)}") from None
    except BaseException:  # Ctrl-C, SIGTERM (the CLI's), the policy's, the renderer's or the disk's error
        writer.abort()
        raise
    finally:
        partial.unlink(missing_ok=True)
    return Recording(path, done, frames, size, time.monotonic() - started, path.stat().st_size, stopped)

"""Image observations travel as new frames (runtime/onpolicy/frames.py): the learner rebuilds exactly
the stacks the actor saw, refuses an encoding a hostile actor made up, and vectors travel as before."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from surreal.algorithms.ppo import PPO
from surreal.algorithms.ppo.presets import PIXELS, preset_for
from surreal.protocol.codec import CodecError, decode_map, encode_map
from surreal.protocol.types import Fragment
from surreal.runtime.envs.make import EnvSpaces, resolve_env, spaces_for
from surreal.runtime.onpolicy import actor as actor_module
from surreal.runtime.onpolicy.actor import Actor
from surreal.runtime.onpolicy.fragment import experience_schema, fragment_bytes, open_fragment
from surreal.runtime.onpolicy.frames import (
    WIRE_TENSORS,
    encode_stacks,
    key_rows,
    stacks_problem,
    with_stacks,
)
from surreal.runtime.onpolicy.learner import Learner

BREAKOUT = "ALE/Breakout-v5"
SMALL = dict(envs_per_agent=2, fragment_length=64, steps_per_update=256, minibatch_size=64)
IMAGE = (3, 20, 20)  # a small image the CNN takes, 3 frames to a stack
SPACES = EnvSpaces(int(np.prod(IMAGE)), True, 4, None, None, IMAGE)


def stacked(rng: np.random.Generator, rows: int, envs: int, image: tuple[int, int, int],
            resets: np.ndarray, pad: str = "copy") -> np.ndarray:  # fmt: skip
    """Observations [rows, envs, C, H, W] of a frame stack fed random frames: each row shifts its
    predecessor by one frame, except where `resets` [rows, envs] is set (and row 0), where the stack
    starts over as `pad` says: C copies of the frame ("copy"), zeros then the frame ("zeros")."""
    c, h, w = image
    obs = np.empty((rows, envs, c, h, w), np.uint8)
    frames = rng.integers(0, 256, (rows, envs, h, w), dtype=np.uint8)
    for t in range(rows):
        for n in range(envs):
            if t == 0 or resets[t, n]:
                obs[t, n] = frames[t, n] if pad == "copy" else 0
            else:
                obs[t, n, :-1] = obs[t - 1, n, 1:]
            obs[t, n, -1] = frames[t, n]
    return obs


def round_trip(obs: np.ndarray) -> np.ndarray:
    """Encode, through the protocol's codec (read-only views come back), and rebuild."""
    wire = decode_map(encode_map(encode_stacks(obs)))
    return with_stacks(wire)["obs"]


def honest(obs: np.ndarray) -> dict[str, np.ndarray]:
    """A whole fragment around `obs` as an actor of SPACES with the PIXELS preset sends it."""
    t_len, n = obs.shape[0] - 1, obs.shape[1]
    zeros = np.zeros((t_len, n), np.float32)
    return {
        **encode_stacks(obs), "actions": np.zeros((t_len, n), np.int64), "logprobs": zeros,
        "rewards": zeros, "terminated": zeros.astype(bool), "truncated": zeros.astype(bool),
        "trunc_index": np.zeros((0, 2), np.int64), "trunc_obs": np.zeros((0, *IMAGE), np.uint8),
        **{f"{s}_{m}": np.zeros(1 if s == "ret" or m == "count" else 0) for s in ("obs", "ret")
           for m in ("count", "mean", "m2")},  # fmt: skip
        "episode_returns": np.zeros(0), "episode_lengths": np.zeros(0, np.int64),
    }  # fmt: skip


@pytest.fixture(scope="module")
def breakout() -> tuple[list[np.ndarray], list[dict[str, np.ndarray]], Learner]:
    """Two fragments of real Breakout play in a row (random play loses a life every ~20 steps),
    with the stacks the actor saw; and a learner to give them to."""
    cfg = dataclasses.replace(preset_for(BREAKOUT), **SMALL)
    learner = Learner(PPO(), cfg, spaces_for(BREAKOUT), 10**6)
    actor = Actor(cfg, BREAKOUT, 2, seed=1)
    actor.set_params(learner.params())
    seen: list[np.ndarray] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(actor_module, "encode_stacks", lambda obs: encode_stacks(seen.append(obs.copy()) or obs))
        sent = [actor.collect() for _ in range(2)]
    actor.close()
    return seen, sent, learner


def test_real_atari_fragments_rebuild_bit_exact_with_keys_only_at_row_0_and_resets(breakout) -> None:
    seen, sent, learner = breakout
    schema = experience_schema(learner.spaces)
    for obs, tensors in zip(seen, sent, strict=True):
        wire = decode_map(encode_map(tensors), schema)  # what the learner's server hands over
        assert set(WIRE_TENSORS) <= set(wire) and "obs" not in wire
        rebuilt, rejection = open_fragment(wire, learner.spaces, learner.cfg)
        assert rejection is None and rebuilt is not None
        np.testing.assert_array_equal(rebuilt["obs"], obs)
        # The wrapper's stack shifts, and starts over at a reset (after a lost life): exactly there.
        done = tensors["terminated"] | tensors["truncated"]
        expected = np.concatenate([np.ones((1, obs.shape[1]), bool), done])
        np.testing.assert_array_equal(key_rows(obs), expected)
        assert done.any(), "no reset in the fragment: the test would not cover one"
        assert learner.add_fragment(Fragment("w0", 0, wire))
    assert learner.counters.rejected["malformed"] == 0


def test_the_create_time_bound_holds_for_real_and_worst_case_fragments(breakout) -> None:
    seen, sent, learner = breakout
    bound = fragment_bytes(learner.cfg, resolve_env(BREAKOUT), 1)
    size = sum(t.ByteSize() for t in encode_map(sent[0]))
    worst = dict(sent[0])  # every row a key: the most an honest actor can send
    obs, c = seen[0], seen[0].shape[2]
    worst["obs_key_index"] = np.argwhere(np.ones(obs.shape[:2], bool)).astype(np.int64)
    worst["obs_keys"] = obs[:, :, : c - 1].reshape(-1, c - 1, *obs.shape[3:])
    worst_size = sum(t.ByteSize() for t in encode_map(worst))
    np.testing.assert_array_equal(with_stacks(worst)["obs"], obs)
    assert size * 3 < worst_size <= bound  # most rows are the new frame alone


@pytest.mark.parametrize("pad", ["copy", "zeros"])
@pytest.mark.parametrize(
    ("image", "reset_rows"),
    [(IMAGE, []), ((4, 7, 5), [1]), ((4, 7, 5), [6]), ((4, 7, 5), "all"), ((1, 7, 5), [3]),
     ((2, 7, 5), [2, 3])],
)  # fmt: skip
def test_synthetic_stacks_rebuild_bit_exact(image, reset_rows, pad) -> None:
    rng = np.random.default_rng(0)
    rows, envs = 7, 3  # T = 6: a reset at row 6 is one of the last step, row T
    resets = np.zeros((rows, envs), bool)
    resets[:, 1] = True if reset_rows == "all" else np.isin(np.arange(rows), reset_rows)
    obs = stacked(rng, rows, envs, image, resets, pad)
    np.testing.assert_array_equal(round_trip(obs), obs)
    keys = key_rows(obs)
    if image[0] > 1:  # random frames: a restarted stack is never a shift
        np.testing.assert_array_equal(keys[1:], resets[1:])
    else:  # one frame: every observation is its new frame, only row 0 has (empty) keys
        assert keys.sum() == envs and encode_stacks(obs)["obs_keys"].nbytes == 0


def test_images_that_are_not_stacks_or_never_change_rebuild_bit_exact() -> None:
    rng = np.random.default_rng(1)
    rgb = rng.integers(0, 256, (9, 2, 3, 6, 6), dtype=np.uint8)  # no shift anywhere: every row a key
    assert key_rows(rgb).all()
    np.testing.assert_array_equal(round_trip(rgb), rgb)
    blank = np.zeros((9, 2, 4, 6, 6), np.uint8)  # every stack is its predecessor shifted
    assert key_rows(blank).sum() == 2
    np.testing.assert_array_equal(round_trip(blank), blank)
    single = rng.integers(0, 256, (1, 1, 4, 6, 6), dtype=np.uint8)  # one row, one env
    np.testing.assert_array_equal(round_trip(single), single)


def _hostile() -> dict[str, dict[str, np.ndarray]]:
    """Encodings of one fragment (6 steps of 3 envs, resets) that no honest actor sends."""
    rng = np.random.default_rng(2)
    resets = np.zeros((7, 3), bool)
    resets[[2, 4], [1, 2]] = True
    good = honest(stacked(rng, 7, 3, IMAGE, resets))
    keys, index = good["obs_keys"], good["obs_key_index"]
    assert len(index) == 5

    def bad(**changes: np.ndarray) -> dict[str, np.ndarray]:
        return {**good, **changes}

    swapped = index.copy()
    swapped[[0, 1]] = swapped[[1, 0]]
    return {
        "t beyond row T": bad(obs_key_index=np.vstack([index[:4], [[7, 0]]])),
        "n beyond the envs": bad(obs_key_index=np.vstack([index[:4], [[4, 3]]])),
        "negative index": bad(obs_key_index=np.vstack([index[:4], [[-1, 0]]])),
        "duplicated key": bad(obs_key_index=np.vstack([index[:4], index[3:4]])),
        "unordered keys": bad(obs_key_index=swapped),
        "row 0 missing": bad(obs_keys=keys[1:], obs_key_index=index[1:]),
        "keys without index": bad(obs_keys=keys[:4]),
        "whole stacks as keys": bad(obs_keys=np.zeros((5, *IMAGE), np.uint8)),
        "index of 3 columns": bad(obs_key_index=np.hstack([index, index[:, :1]])),
        "a float index": bad(obs_key_index=index.astype(np.float64)),
        "frames of T rows": bad(obs_frames=good["obs_frames"][:-1]),
        "frames of other envs": bad(obs_frames=good["obs_frames"][:, :2]),
        "frames of another size": bad(obs_frames=good["obs_frames"][:, :, :-1]),
        "obs sent whole too": bad(obs=np.zeros((7, 3, *IMAGE), np.uint8)),
        "no frames": {k: v for k, v in good.items() if k != "obs_frames"},
    }


def test_an_honest_synthetic_fragment_is_accepted() -> None:
    learner = Learner(PPO(), PIXELS, SPACES, 10**6)
    good = honest(stacked(np.random.default_rng(2), 7, 3, IMAGE, np.zeros((7, 3), bool)))
    assert stacks_problem(good, IMAGE) is None
    assert learner.add_fragment(Fragment("w0", 0, good))


@pytest.mark.parametrize("case", sorted(_hostile()))
def test_hostile_encodings_are_rejected_as_malformed_and_counted(case: str) -> None:
    learner = Learner(PPO(), PIXELS, SPACES, 10**6)
    tensors = _hostile()[case]
    assert stacks_problem(tensors, IMAGE) is not None
    assert not learner.add_fragment(Fragment("rogue", 0, tensors))
    c = learner.counters
    assert c.rejected["malformed"] == 1 and sum(c.rejected.values()) == 1
    assert (c.env_steps, learner.intake.steps) == (0, 0)
    assert learner.status()["rejected_fragments"]["malformed"] == 1


def test_the_schema_refuses_misshapen_wire_tensors_before_the_learner() -> None:
    schema = experience_schema(SPACES)
    wire = encode_map(_hostile()["whole stacks as keys"])
    with pytest.raises(CodecError, match="obs_keys"):
        decode_map(wire, schema)
    with pytest.raises(CodecError, match="obs"):  # an obs tensor is not part of an image fragment
        decode_map(encode_map(_hostile()["obs sent whole too"]), schema)


def test_vector_observations_travel_as_they_are() -> None:
    cfg = dataclasses.replace(preset_for("CartPole-v1"), envs_per_agent=2, fragment_length=8)
    spaces = spaces_for("CartPole-v1")
    actor = Actor(cfg, "CartPole-v1", 2, seed=0)
    actor.set_params(Learner(PPO(), cfg, spaces, 10**6).params())
    tensors = actor.collect()
    schema = experience_schema(spaces)
    assert tensors["obs"].shape == (9, 2, 4) and tensors["obs"].dtype == np.float32
    assert not set(WIRE_TENSORS) & (set(schema) | set(tensors))
    opened, rejection = open_fragment(tensors, spaces, cfg)
    assert rejection is None and opened is tensors
    vector = resolve_env("CartPole-v1")  # 9 rows of 4 float32s, then actions and the rest
    assert fragment_bytes(cfg, vector, 1) == 2 * 9 * 16 + 2 * 8 * (8 + 10) + 2 * (16 + 24)

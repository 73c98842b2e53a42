"""Observations that are not one Box (obs_leaves.py): every gymnasium space described as leaves,
what a policy cannot take refused by key, each leaf on the wire in its own dtype and distrusted as
what it is, and the networks given packed rows. CueWorld (tests/envs/cue_world.py) holds a leaf
of every kind and a Text one."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from surreal.algorithms.ppo import PPO
from surreal.algorithms.ppo.presets import preset_for
from surreal.protocol.codec import CodecError, decode_map, encode_map
from surreal.protocol.types import Fragment
from surreal.runtime.envs import obs_leaves
from surreal.runtime.envs.make import EnvBatch, resolve_env, spaces_for, spaces_of
from surreal.runtime.envs.obs_leaves import ObsLeaf, describe, pack, select
from surreal.runtime.envs.ref import EnvRef, extend_import_path
from surreal.runtime.es.presets import check_env_supported as es_check
from surreal.runtime.onpolicy.actor import Actor
from surreal.runtime.onpolicy.fragment import experience_schema, open_fragment
from surreal.runtime.onpolicy.learner import Learner
from surreal.runtime.onpolicy.serial import train_serial

extend_import_path([str(Path(__file__).resolve().parents[1] / "envs")])
CUE = "cue_world:CueWorld-v0"
KEYS = ("bits", "cue", "frame", "noise")  # all but the Text "note"

SPACE = gym.spaces.Dict({
    "pos": gym.spaces.Box(-1.0, 1.0, (2, 3), np.float64),
    "grid": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8),
    "parts": gym.spaces.Tuple((gym.spaces.Discrete(3, start=-1), gym.spaces.MultiDiscrete([2, 5]))),
    "inner": gym.spaces.Dict({"flags": gym.spaces.MultiBinary(4)}),
})  # fmt: skip


def test_every_space_is_described_as_leaves_in_the_space_s_order() -> None:
    leaves = describe(SPACE)
    assert [(leaf.path, leaf.kind, leaf.shape) for leaf in leaves] == [
        ("grid", "image", (3, 8, 8)),
        ("inner.flags", "binary", (4,)),
        ("parts.0", "discrete", (1,)),
        ("parts.1", "discrete", (2,)),
        ("pos", "vector", (6,)),
    ]  # gymnasium's Dict sorts its keys
    assert (leaves[2].nvec, leaves[2].start, leaves[3].nvec) == ((3,), (-1,), (2, 5))
    assert [leaf.width for leaf in leaves] == [192, 4, 3, 7, 6]
    assert [leaf.name for leaf in leaves][:2] == ["obs.grid", "obs.inner.flags"]
    assert describe(gym.spaces.Discrete(16)) == [ObsLeaf("", "discrete", (1,), (16,), (0,))]
    assert describe(gym.spaces.Text(5))[0].kind == "unsupported"
    # Round trip through the spec file's plain values.
    assert [ObsLeaf.from_dict(leaf.to_dict()) for leaf in leaves] == leaves


def test_a_policy_takes_the_keys_it_is_given_and_is_told_by_name_what_it_cannot() -> None:
    leaves = describe(CueWorldSpace())
    with pytest.raises(ValueError, match=r"observation key 'note' is a Text, which no network here can "
                       r"encode: leave it out with --set obs_keys=bits,cue,frame,noise"):  # fmt: skip
        select(leaves, (), "cue")
    assert [leaf.path for leaf in select(leaves, ("cue", "noise"), "cue")] == ["cue", "noise"]
    with pytest.raises(ValueError, match=r"obs_keys colour: cue's observations have the keys bits, cue, "):
        select(leaves, ("colour",), "cue")
    two = describe(gym.spaces.Dict({"a": SPACE["grid"], "b": SPACE["grid"]}))
    with pytest.raises(ValueError, match="observation keys a, b are all images"):
        select(two, (), "cams")
    with pytest.raises(ValueError, match="CartPole-v1's observations are one Box, with no keys"):
        spaces_for("CartPole-v1").keep(("cue",), "CartPole-v1")


def CueWorldSpace() -> gym.Space:  # noqa: N802 - reads as the space it is
    return gym.make(CUE).observation_space


def test_packed_rows_one_hot_each_discrete_entry_from_its_start() -> None:
    leaves = describe(SPACE)
    rng = np.random.default_rng(0)
    raw = [SPACE.sample() for _ in range(3)]
    rows = obs_leaves.empty(leaves, 3)
    for i, o in enumerate(raw):
        obs_leaves.put(leaves, rows, i, o)
    packed = pack(leaves, rows)
    assert packed.shape == (3, 212) and packed.dtype == np.float32
    for i, o in enumerate(raw):
        np.testing.assert_array_equal(packed[i, :192].reshape(3, 8, 8), np.moveaxis(o["grid"], -1, 0))
        np.testing.assert_array_equal(packed[i, 192:196], o["inner"]["flags"])
        assert packed[i, 196:199].tolist() == np.eye(3)[o["parts"][0] + 1].tolist()  # start -1
        assert packed[i, 199:206].tolist() == [*np.eye(2)[o["parts"][1][0]], *np.eye(5)[o["parts"][1][1]]]
        np.testing.assert_allclose(packed[i, 206:], np.ravel(o["pos"]), rtol=1e-6)
    assert rng is not None and obs_leaves.image_slice(leaves) == (0, leaves[0])
    # No rows (a fragment without truncations): no packed rows.
    assert pack(leaves, obs_leaves.empty(leaves, 0)).shape == (0, 212)


def test_an_env_batch_gives_each_leaf_in_its_own_dtype() -> None:
    envs = EnvBatch(CUE, 3, seed=4, obs_keys=KEYS)
    obs = envs.reset()
    assert isinstance(obs, dict) and {k: (v.dtype, v.shape) for k, v in obs.items()} == {
        "obs.bits": (np.uint8, (3, 2)), "obs.cue": (np.int64, (3, 1)),
        "obs.frame": (np.uint8, (3, 3, 6, 6)), "obs.noise": (np.float32, (3, 3)),
    }  # fmt: skip
    cue = obs["obs.cue"][:, 0]
    assert ((0 <= cue) & (cue < 4)).all()  # the start (10) taken off
    for i in range(3):  # channels first now: the bright row is the cue's
        assert (obs["obs.frame"][i][:, cue[i]] == 255).all()
    res = envs.step(np.zeros(3, np.int64))
    assert isinstance(res.obs, dict) and res.obs["obs.noise"].shape == (3, 3)
    envs.close()


def _cue_setup() -> tuple:
    cfg = dataclasses.replace(preset_for(CUE), obs_keys=KEYS, fragment_length=16)
    spaces = spaces_for(CUE).keep(cfg.obs_keys)
    learner = Learner(PPO(), cfg, spaces, 10**9)
    actor = Actor(cfg, CUE, 4, seed=1)
    actor.set_params(learner.params())
    return cfg, spaces, learner, actor


def test_leaves_travel_apart_and_the_learner_trains_on_their_packed_rows() -> None:
    cfg, spaces, learner, actor = _cue_setup()
    fragment = actor.collect()
    wire = decode_map(encode_map(fragment), experience_schema(spaces))
    assert {"obs.cue", "obs.bits", "obs.noise", "obs.frame_frames", "trunc_obs.cue"} <= wire.keys()
    assert "obs" not in wire and wire["obs.cue"].dtype == np.int64 and wire["obs.bits"].dtype == np.uint8
    opened, rejection = open_fragment(wire, spaces, cfg)
    assert rejection is None and opened is not None
    assert opened["obs"].shape == (17, 4, spaces.obs_dim) and opened["trunc_obs"].shape[1] == spaces.obs_dim
    # The cue's one-hot, where its leaf lies in the packed row (after bits' 2 columns).
    np.testing.assert_array_equal(opened["obs"][..., 2:6].argmax(-1), fragment["obs.cue"][..., 0])
    # 16 steps of 4 envs end 8 episodes; their last observations travel as truncations.
    assert len(fragment["trunc_index"]) == 8 and fragment["trunc_obs.frame"].shape == (8, 3, 6, 6)
    while not learner.ready():
        assert learner.add_fragment(Fragment("w0", actor.version, decode_map(encode_map(actor.collect()))))
    stats = learner.update()
    assert stats and all(np.isfinite(v) for v in stats.values()), stats
    # A float cue is refused by the schema before the learner sees it.
    bad = {**fragment, "obs.cue": fragment["obs.cue"].astype(np.float32)}
    with pytest.raises(CodecError, match="obs.cue"):
        decode_map(encode_map(bad), experience_schema(spaces))


def _poison(name: str, fragment: dict[str, np.ndarray]) -> None:
    if name == "cue":
        fragment["obs.cue"][3, 1, 0] = 4  # one past Discrete(4)
    elif name == "negative_cue":
        fragment["trunc_obs.cue"][0, 0] = -1
    elif name == "bits":
        fragment["obs.bits"][0, 0, 1] = 2
    elif name == "noise":
        fragment["obs.noise"][5, 2, 0] = np.nan
    elif name == "beyond_clip":
        fragment["obs.noise"][5, 2, 0] = 1e6
    elif name == "frames":
        fragment["obs.frame_key_index"] = fragment["obs.frame_key_index"][1:]
        fragment["obs.frame_keys"] = fragment["obs.frame_keys"][1:]
    elif name == "trunc":
        fragment["trunc_obs.noise"] = fragment["trunc_obs.noise"][1:]


@pytest.mark.parametrize(
    ("poison", "reason"),
    [("cue", "out_of_range"), ("negative_cue", "out_of_range"), ("bits", "out_of_range"),
     ("noise", "non_finite"), ("beyond_clip", "out_of_range"), ("frames", "malformed"),
     ("trunc", "malformed")],
)  # fmt: skip
def test_a_hostile_leaf_rejects_its_fragment(poison: str, reason: str) -> None:
    cfg, spaces, learner, actor = _cue_setup()
    fragment = {k: np.array(v) for k, v in actor.collect().items()}
    _poison(poison, fragment)
    wire = decode_map(encode_map(fragment), experience_schema(spaces))
    opened, rejection = open_fragment(wire, spaces, cfg)
    assert opened is None and rejection is not None and rejection.reason == reason, rejection
    before = learner.counters.env_steps
    learner.add_fragment(Fragment("rogue", actor.version, wire))
    assert learner.counters.env_steps == before and learner.counters.rejected[reason] == 1


def test_the_spec_file_carries_the_leaves_and_es_refuses_them_by_name() -> None:
    facts = resolve_env(EnvRef(CUE))
    assert spaces_of(facts) == spaces_for(CUE)
    assert [leaf["path"] for leaf in facts.obs_leaves] == ["bits", "cue", "frame", "noise", "note"]
    with pytest.raises(ValueError, match=r"ES takes observations that are one Box; .* cue \(discrete 4\)"):
        es_check(CUE, resolved=facts)
    blackjack = spaces_for("Blackjack-v1").keep(())  # a Tuple of Discretes
    assert [leaf.path for leaf in blackjack.obs_leaves] == ["0", "1", "2"] and blackjack.obs_dim == 45


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device here")
def test_the_mixed_network_trains_on_cuda_and_its_actor_samples_what_the_learner_computes() -> None:
    cfg = dataclasses.replace(preset_for(CUE), obs_keys=KEYS, fragment_length=16, steps_per_update=64,
                              minibatch_size=32, device="cuda")  # fmt: skip
    learner = Learner(PPO(), cfg, spaces_for(CUE).keep(KEYS), total_steps=10_000)
    actor = Actor(cfg, CUE, 4, seed=0)
    actor.set_params(learner.params())
    assert learner.add_fragment(Fragment("w0", actor.version, actor.collect()))
    assert learner.update() and learner.params().version == 1
    assert next(learner.net.parameters()).device.type == "cuda"


def test_the_actor_s_log_probs_are_the_mixed_learner_s() -> None:
    """The actor runs the mixed network's head on the CPU from published weights; the learner's
    importance ratio needs the same log-probabilities for the same packed rows."""
    cfg, spaces, learner, actor = _cue_setup()
    fragment = actor.collect()
    opened, _ = open_fragment(decode_map(encode_map(fragment), experience_schema(spaces)), spaces, cfg)
    assert opened is not None
    # On the learner's device (a GPU where there is one: run there, this test found its CPU tensors)
    obs = torch.from_numpy(opened["obs"][:-1].reshape(-1, spaces.obs_dim)).to(learner.device)
    actions = torch.from_numpy(fragment["actions"].reshape(-1)).to(learner.device)
    with torch.no_grad():
        logp, _, _ = learner.net.evaluate(obs, actions)
    np.testing.assert_allclose(logp.cpu().numpy(), fragment["logprobs"].reshape(-1), atol=1e-5)


def test_frozen_lake_is_solved_from_its_discrete_cell() -> None:
    """FrozenLake-v1 without slipping: a Discrete(16) observation, one-hot in the packed row.
    Serial harness, the default preset, 20k steps: 10 seeds (0-9) all reached 1.0 (every
    evaluation episode at the goal; a random walk almost never gets there), 1.5-2.7 s each. The
    bar leaves room for 5 of 10 evaluation episodes lost."""
    ref = EnvRef("FrozenLake-v1", {"is_slippery": False})
    cfg = dataclasses.replace(preset_for(ref), eval_interval=10**9)
    assert train_serial(cfg, ref, algo=PPO(), total_steps=20_000, seed=0).final_return >= 0.5

"""Observations of every kind in the off-policy runtime, on CueWorld (tests/envs/cue_world.py)
with Box actions: its Dict of a discrete cue (Discrete from 10), a uint8 image, a float vector
and bits travels leaf by leaf in its own dtypes, a shard takes it and distrusts each leaf's
values, the learner packs a sample and SAC's networks (the image through a CNN) train on it, and
the actor's policy (numpy; the CNN in torch) acts as the learner's network does. A plain image
(PixelTarget) is one uint8 leaf."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from surreal.algorithms.sac import SAC, SACConfig
from surreal.protocol.types import Fragment, Params
from surreal.runtime.envs.make import spaces_for
from surreal.runtime.envs.ref import EnvRef, extend_import_path
from surreal.runtime.offpolicy import obs
from surreal.runtime.offpolicy.actor import Actor
from surreal.runtime.offpolicy.config import shard_memory_mb, transition_bytes
from surreal.runtime.offpolicy.policy import SquashedGaussian
from surreal.runtime.offpolicy.shard import Shard, rows_problem, schema

extend_import_path([str(Path(__file__).resolve().parents[2] / "envs")])

CUE = EnvRef("cue_world:CueWorld-v0", {"actions": "box", "note": False})
PIXELS = EnvRef("pixel_target:PixelTarget", {"size": 8})
CFG = SACConfig(hidden_sizes=(16, 16), batch_size=8, buffer_size=64, learning_starts=8, replay_ratio=8.0,
                fragment_length=4, random_steps=0)  # fmt: skip


def _fragment(actor: Actor) -> Fragment:
    return Fragment(worker_id="actor-0", policy_version=0, tensors=actor.collect())


def test_every_leaf_travels_in_its_dtype_and_a_shard_distrusts_each(tmp_path: Path) -> None:
    sp = spaces_for(CUE)
    assert obs.fields(sp) == {
        "obs.cue": (np.dtype(np.int64), (1,)), "next_obs.cue": (np.dtype(np.int64), (1,)),
        "obs.frame": (np.dtype(np.uint8), (3, 6, 6)), "next_obs.frame": (np.dtype(np.uint8), (3, 6, 6)),
        "obs.noise": (np.dtype(np.float32), (3,)), "next_obs.noise": (np.dtype(np.float32), (3,)),
        "obs.bits": (np.dtype(np.uint8), (2,)), "next_obs.bits": (np.dtype(np.uint8), (2,)),
    }  # fmt: skip
    # A row holds the image a byte a pixel (twice: this observation and the next), not 4 packed floats.
    assert transition_bytes(sp) == 2 * (8 + 108 + 12 + 2) + 4 * (4 + 1) + 1
    assert shard_memory_mb(dataclasses.replace(CFG, buffer_size=1_000_000), sp, 2) == 256 + math.ceil(
        500_000 * transition_bytes(sp) / 2**20
    )
    assert SAC().preset(CUE, 1).buffer_size == 100_000  # pixels: 1M rows would not fit a node
    actor = Actor(SAC(), CFG, CUE, num_envs=2, seed=0, random_steps=0, total_steps=1_000)
    tensors = actor.collect()
    assert set(tensors) == set(schema(sp)) and tensors["obs.frame"].shape == (8, 3, 6, 6)
    assert 0 <= tensors["obs.cue"].min() and tensors["obs.cue"].max() <= 3  # the start of 10 taken off
    # A step's next observation is the next step's observation (no episode ends in these 4 steps).
    assert np.array_equal(tensors["obs.frame"][2:], tensors["next_obs.frame"][:-2])
    assert rows_problem(sp, tensors, 1e6) is None
    for name, bad, why in (("obs.cue", 4, "outside [0, n)"), ("next_obs.bits", 2, "not 0 or 1"),
                           ("next_obs.noise", np.nan, "NaN")):  # fmt: skip
        broken = {k: v.copy() for k, v in tensors.items()}
        broken[name][0] = bad
        assert why in str(rows_problem(sp, broken, 1e6)), name

    shard = Shard(CFG, sp, 0, 1, tmp_path, agents=2)  # the actor's 2 envs: a worker of 2 agents
    shard.restore()
    bad = _fragment(actor)
    bad.tensors["obs.cue"][3] = -1
    assert shard.insert(bad, wait=0.0) is None and shard.state().refused == 1
    assert shard.insert(_fragment(actor), wait=0.0) and shard.insert(_fragment(actor), wait=0.0)
    sampled = shard.sample(CFG.batch_size, wait=0.0)
    assert sampled.rows is not None and sampled.rows["obs.frame"].dtype == np.uint8
    actor.close()


def test_sac_trains_through_the_cnn_and_the_actor_acts_as_the_learner_network(tmp_path: Path) -> None:
    sp = spaces_for(CUE)
    actor = Actor(SAC(), CFG, CUE, num_envs=2, seed=0, random_steps=0, total_steps=1_000)
    rows = actor.collect()
    batch = obs.batch(sp, rows)
    assert [leaf.path for leaf in sp.obs_leaves] == ["bits", "cue", "frame", "noise"]  # the Dict's order
    width = 2 + 4 + 108 + 3  # bits, the cue one-hot, the image's pixels, noise
    assert batch["obs"].shape == (8, width) and batch["obs"].dtype == np.float32
    cue = rows["obs.cue"][:, 0]
    assert np.array_equal(batch["obs"][:, 2:6].argmax(1), cue) and batch["obs"][:, 2:6].sum() == 8

    torch.manual_seed(0)
    nets = SAC().make(CFG, sp)
    assert nets.actor.encoder.trunk is not None and nets.q.encoder.trunk is not None  # a CNN each
    before = {k: v.clone() for k, v in nets.state_dict().items() if ".encoder." in k}
    stats = SAC().update(nets, {k: torch.from_numpy(v) for k, v in batch.items()}, CFG)
    assert all(np.isfinite(float(v)) for v in stats.values())
    moved = {k for k, v in nets.state_dict().items() if k in before and not torch.equal(v, before[k])}
    assert any(k.startswith("actor.encoder.") for k in moved) and any(
        k.startswith("q.encoder.") for k in moved
    )

    weights = {k: v.detach().numpy() for k, v in nets.actor.state_dict().items()}
    policy = SquashedGaussian(weights, CFG.activation, np.random.default_rng(0), sp)
    with torch.no_grad():
        h = nets.actor.trunk(nets.actor.encoder(torch.from_numpy(batch["obs"])))
        expected = torch.tanh(nets.actor.mu(h)).numpy()
    np.testing.assert_allclose(policy.act(batch["obs"], deterministic=True), expected, atol=1e-5)
    actor.set_params(Params(1, weights, {}))  # what the actor builds from the published weights
    assert isinstance(actor.policy, SquashedGaussian) and actor.policy.features.encoder is not None
    tensors = actor.collect()
    assert tensors["actions"].shape == (8, 4) and np.abs(tensors["actions"]).max() <= 1.0
    actor.close()


@pytest.mark.parametrize("env", [PIXELS, "Pendulum-v1"])
def test_one_image_or_one_box_is_one_leaf_named_obs(env: EnvRef | str) -> None:
    sp = spaces_for(env)
    if sp.image_shape is None:
        assert obs.fields(sp) == {
            "obs": (np.dtype(np.float32), (3,)),
            "next_obs": (np.dtype(np.float32), (3,)),
        }
        return
    assert obs.fields(sp) == {
        "obs": (np.dtype(np.uint8), (1, 8, 8)),
        "next_obs": (np.dtype(np.uint8), (1, 8, 8)),
    }
    images = np.random.default_rng(0).integers(0, 256, (5, 1, 8, 8), dtype=np.uint8)
    packed = obs.policy_rows(sp, images)
    assert packed.shape == (5, 64) and np.array_equal(packed, images.reshape(5, 64).astype(np.float32))

"""PPO on image observations: uint8 on the wire, a CNN actor-critic whose actor-side samples have
the log-probabilities the learner computes, and a pixel task a CNN must solve (bounded by env steps)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from surreal.algorithms.ppo import PPO
from surreal.algorithms.ppo.presets import ATARI, PIXELS, preset_for
from surreal.protocol.codec import CodecError
from surreal.protocol.types import Fragment
from surreal.runtime.envs.make import EnvSpaces, spaces_for
from surreal.runtime.envs.ref import EnvRef, extend_import_path
from surreal.runtime.onpolicy.actor import Actor
from surreal.runtime.onpolicy.cnn import CNNActorCritic
from surreal.runtime.onpolicy.fragment import experience_schema
from surreal.runtime.onpolicy.learner import Learner
from surreal.runtime.onpolicy.policy import NumpyPolicy

extend_import_path([str(Path(__file__).resolve().parents[1] / "envs")])
PIXEL_ENV = "pixel_target:PixelTarget-v0"  # tests/envs/pixel_target.py: random 4, optimal 16
SMALL = EnvSpaces(obs_dim=2 * 20 * 20, discrete=True, action_dim=4, action_low=None, action_high=None,
                  image_shape=(2, 20, 20))  # fmt: skip
ATARI_LIKE = EnvSpaces(4 * 84 * 84, True, 6, None, None, (4, 84, 84))


def published(net: torch.nn.Module) -> dict[str, np.ndarray]:
    """The weights as they reach an actor: decoded wire buffers are read-only."""
    weights = {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}
    for w in weights.values():
        w.flags.writeable = False
    return weights


def images(n: int, spaces: EnvSpaces, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, *spaces.obs_shape), dtype=np.uint8)


@pytest.mark.parametrize(("spaces", "convs"), [(ATARI_LIKE, 3), (SMALL, 2)])
def test_the_nature_trunk_for_atari_frames_and_a_small_one_below_36_pixels(spaces, convs) -> None:
    net = CNNActorCritic(spaces)
    assert sum(isinstance(m, torch.nn.Conv2d) for m in net.trunk) == convs
    if convs == 3:  # Mnih et al. 2015: 32 8x8/4, 64 4x4/2, 64 3x3/1, 512
        shapes = [
            tuple(m.weight.shape) for m in net.trunk if isinstance(m, torch.nn.Conv2d | torch.nn.Linear)
        ]
        assert shapes == [(32, 4, 8, 8), (64, 32, 4, 4), (64, 64, 3, 3), (512, 3136)]


@pytest.mark.parametrize("spaces", [ATARI_LIKE, SMALL])
def test_actor_samples_have_the_log_probs_the_learner_computes(spaces) -> None:
    torch.manual_seed(0)
    net = CNNActorCritic(spaces)
    with torch.no_grad():
        net.policy.weight.mul_(50.0)  # far from uniform, so a wrong log-prob would show
    policy = NumpyPolicy(published(net), spaces, "tanh", np.random.default_rng(0))
    obs = images(64, spaces)
    actions, logp = policy.act(obs)
    assert actions.dtype == np.int64 and logp.dtype == np.float32
    learner_logp, _, values = net.evaluate(torch.from_numpy(obs), torch.from_numpy(actions))
    np.testing.assert_allclose(logp, learner_logp.detach().numpy(), atol=1e-4)
    assert values.shape == (64,)
    mode, _ = policy.act(obs, deterministic=True)
    np.testing.assert_array_equal(mode, net.head(torch.from_numpy(obs)).argmax(-1).numpy())


def test_parameters_of_another_network_are_refused_with_a_clear_error() -> None:
    weights = published(CNNActorCritic(SMALL))
    with pytest.raises(ValueError, match="do not fit the CNN policy"):
        NumpyPolicy(weights, ATARI_LIKE, "tanh")


def test_images_travel_as_uint8_and_float_images_are_refused_by_the_schema() -> None:
    schema = experience_schema(SMALL)  # images travel as new frames (frames.py): never whole in obs
    assert "obs" not in schema and schema["trunc_obs"].dtype == np.uint8
    assert schema["obs_frames"].dtype == np.uint8 and schema["obs_keys"].dtype == np.uint8
    schema["obs_frames"].check("obs_frames", np.zeros((3, 2, 20, 20), np.uint8))
    schema["obs_keys"].check("obs_keys", np.zeros((2, 1, 20, 20), np.uint8))  # the older C-1 frames
    with pytest.raises(CodecError, match="dtype float32, expected uint8"):
        schema["obs_frames"].check("obs_frames", np.zeros((3, 2, 20, 20), np.float32))
    with pytest.raises(CodecError):
        schema["obs_frames"].check("obs_frames", np.zeros((3, 2, 400), np.uint8))  # flattened
    with pytest.raises(CodecError):
        schema["obs_keys"].check("obs_keys", np.zeros((2, 2, 20, 20), np.uint8))  # whole stacks


def test_the_learner_trains_a_cnn_on_an_actors_uint8_fragments() -> None:
    cfg = dataclasses.replace(preset_for(PIXEL_ENV), envs_per_agent=2, fragment_length=16,
                              steps_per_update=64, minibatch_size=32)  # fmt: skip
    spaces = spaces_for(PIXEL_ENV)
    learner = Learner(PPO(), cfg, spaces, total_steps=10_000)
    actor = Actor(cfg, EnvRef(PIXEL_ENV), 4, seed=0)
    actor.set_params(learner.params())
    before = {k: v.copy() for k, v in learner.params().weights.items()}
    fragment = actor.collect()
    # One channel: every observation is its new frame, and the keys of row 0 hold no older frames.
    assert fragment["obs_frames"].dtype == np.uint8 and fragment["obs_frames"].shape == (17, 4, 16, 16)
    assert fragment["obs_keys"].shape == (4, 0, 16, 16) and "obs" not in fragment
    assert fragment["obs_mean"].shape == (0,)  # images are never normalized: no statistics travel
    assert learner.add_fragment(Fragment("w0", actor.version, fragment))
    stats = learner.update()
    assert stats and stats["batch_steps"] == 64 and np.isfinite(stats["policy_loss"])
    after = learner.params()
    assert after.version == 1 and any(not np.array_equal(before[k], after.weights[k]) for k in before)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device here")
def test_the_cnn_learner_trains_on_cuda_with_frames_moved_as_uint8() -> None:
    cfg = dataclasses.replace(preset_for(PIXEL_ENV), envs_per_agent=2, fragment_length=16,
                              steps_per_update=64, minibatch_size=32, device="cuda")  # fmt: skip
    learner = Learner(PPO(), cfg, spaces_for(PIXEL_ENV), total_steps=10_000)
    moved: list[torch.Tensor] = []
    to_device = learner._to_device
    learner._to_device = lambda a: moved.append(to_device(a)) or moved[-1]  # type: ignore[method-assign]
    actor = Actor(cfg, EnvRef(PIXEL_ENV), 4, seed=0)
    actor.set_params(learner.params())
    assert learner.add_fragment(Fragment("w0", actor.version, actor.collect()))
    assert learner.update() and learner.params().version == 1
    assert moved[0].device.type == "cuda" and moved[0].dtype == torch.uint8  # the frames, as uint8
    assert next(learner.net.parameters()).device.type == "cuda"


def test_pixel_presets_follow_cleanrl_ppo_atari() -> None:
    for cfg in (PIXELS, ATARI):
        assert (cfg.envs_per_agent * 2, cfg.fragment_length, cfg.steps_per_update) == (8, 128, 1024)
        assert (cfg.steps_per_update // cfg.minibatch_size, cfg.epochs) == (4, 4)
        assert (cfg.learning_rate, cfg.clip_coef, cfg.ent_coef, cfg.vf_coef) == (2.5e-4, 0.1, 0.01, 0.5)
        assert not cfg.norm_obs and not cfg.norm_reward and cfg.anneal_lr
    assert preset_for("ALE/Breakout-v5") == ATARI and not ATARI.eval_deterministic
    assert preset_for(PIXEL_ENV) == PIXELS

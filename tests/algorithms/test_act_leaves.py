"""Actions that are not one Discrete from 0 or one 1-D Box (act_leaves.py): every gymnasium action
space described as categorical and Gaussian columns, rows turned into the environment's actions,
the actor's log-probabilities the learner's, a hostile action rejected per leaf kind, and ES's
deterministic policies on them.
CueWorld with `actions="tuple"` (tests/envs/cue_world.py) takes a Tuple of every kind."""

from __future__ import annotations

import contextlib
import dataclasses
import io
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from surreal.algorithms.ppo import PPO
from surreal.algorithms.ppo.presets import preset_for
from surreal.protocol.codec import CodecError, decode_map, encode_map
from surreal.protocol.types import Fragment
from surreal.runtime.envs import act_leaves
from surreal.runtime.envs.act_leaves import ActionLayout, ActLeaf, describe, is_plain
from surreal.runtime.envs.make import EnvBatch, resolve_env, spaces_for, spaces_of
from surreal.runtime.envs.ref import EnvRef, ResolvedEnv, extend_import_path
from surreal.runtime.es.networks import PolicySpec, to_actions
from surreal.runtime.es.presets import preset_for as es_preset
from surreal.runtime.es.serial import train as es_train
from surreal.runtime.onpolicy.actor import Actor
from surreal.runtime.onpolicy.fragment import experience_schema, open_fragment
from surreal.runtime.onpolicy.learner import Learner
from surreal.runtime.onpolicy.networks import ActorCritic, log_prob_entropy
from surreal.runtime.onpolicy.policy import NumpyPolicy

extend_import_path([str(Path(__file__).resolve().parents[1] / "envs")])
from cue_world import ACTION_SPACE, pays  # noqa: E402 - the folder is on the path from here

CUE = EnvRef("cue_world:CueWorld-v0", {"actions": "tuple", "note": False})


def test_every_action_space_is_described_as_categorical_and_gaussian_columns() -> None:
    leaves = describe(ACTION_SPACE)
    assert leaves == [
        ActLeaf("0", "categorical", nvec=(4,)),
        ActLeaf("1.dial", "categorical", nvec=(4, 2)),
        ActLeaf("1.flags", "categorical", nvec=(2, 2)),
        ActLeaf("2", "gaussian", width=4),
    ]
    layout = ActionLayout(leaves)
    # 5 categorical columns (their 14 logits), then 4 Gaussian ones (their means).
    assert (layout.nvec, layout.gaussian, layout.columns, layout.head_dim) == ((4, 4, 2, 2, 2), 4, 9, 18)
    assert layout.padded and layout.cat_index[1].tolist() == [4, 5, 6, 7]
    assert layout.pad[2].tolist() == [False, False, True, True]
    assert [ActLeaf.from_dict(leaf.to_dict()) for leaf in leaves] == leaves
    assert is_plain(gym.spaces.Discrete(3)) and is_plain(gym.spaces.Box(-1, 1, (3,)))
    assert not is_plain(gym.spaces.Discrete(3, start=1)) and not is_plain(gym.spaces.Box(-1, 1, (2, 2)))
    assert describe(gym.spaces.MultiBinary((2, 3))) == [ActLeaf("", "categorical", nvec=(2,) * 6)]
    with pytest.raises(ValueError, match=r"action key 'say' is a Text, which no policy here can produce"):
        describe(gym.spaces.Dict({"say": gym.spaces.Text(4), "go": gym.spaces.Discrete(2)}))
    with pytest.raises(ValueError, match=r"the action space is a Box of int64, which no policy here samples"):
        describe(gym.spaces.Box(0, 3, (2,), np.int64))


def test_a_row_becomes_the_environment_s_own_action() -> None:
    layout = act_leaves.layout(tuple(describe(ACTION_SPACE)))
    # pick 2 (as 3: start 1), dial (2, 0), flags (0, 1), push beyond the bounds on both sides.
    row = np.array([2, 2, 0, 0, 1, -0.5, -3.0, -0.5, 2.0], np.float32)
    action = layout.to_env(ACTION_SPACE, row)
    assert ACTION_SPACE.contains(action)
    pick, parts, push = action
    assert pick == 3 and parts["dial"].tolist() == [2, 0] and parts["flags"].tolist() == [0, 1]
    assert parts["flags"].dtype == np.int8 and push.dtype == np.float32
    np.testing.assert_array_equal(push, [[-0.5, -1.0], [-0.5, 1.0]])  # clipped, reshaped
    # For cue 2 every categorical part is right (3 of 4); the push is off by 0.5 and 1.5 in two places.
    assert pays(2, action) == 3.0 + (1 - (0.25 + 2.25) / 4)


def test_the_policy_samples_each_column_from_its_own_distribution() -> None:
    """Numpy sampling (actors) against torch.distributions on the same head output: each
    categorical column's frequencies, the summed log-probabilities, the learner's entropy."""
    spaces = spaces_for(CUE)._replace(obs_dim=1, obs_leaves=())  # the head's output is set below
    layout = spaces.action_layout
    rng = np.random.default_rng(0)
    out = rng.normal(0, 1.5, (1, layout.head_dim)).astype(np.float32)
    weights = {k: v.detach().numpy() for k, v in ActorCritic(spaces).state_dict().items()}
    policy = NumpyPolicy(weights, spaces, "tanh", np.random.default_rng(1))
    policy.head, policy.std = (lambda obs: np.repeat(out, len(obs), 0)), np.full(4, 0.5, np.float32)
    policy._logp_const = np.float32(-4 * np.log(0.5) - 2 * np.log(2 * np.pi))
    actions, logp = policy.act(np.zeros((20_000, 1), np.float32))
    offsets = np.cumsum((0, *layout.nvec))
    dists = [
        torch.distributions.Categorical(logits=torch.from_numpy(out[0, a:b]))
        for a, b in zip(offsets[:-1], offsets[1:], strict=True)
    ]
    for k, dist in enumerate(dists):
        seen = np.bincount(actions[:, k].astype(int), minlength=layout.nvec[k]) / len(actions)
        np.testing.assert_allclose(seen, dist.probs.numpy(), atol=0.015)  # 20k draws: sd <= 0.0036
    normal = torch.distributions.Normal(torch.from_numpy(out[0, layout.logits :]), torch.full((4,), 0.5))
    a = torch.from_numpy(actions)
    expected = sum(d.log_prob(a[:, k]) for k, d in enumerate(dists)) + normal.log_prob(a[:, 5:]).sum(-1)
    np.testing.assert_allclose(logp, expected.numpy(), atol=1e-4)
    learner_logp, entropy = log_prob_entropy(
        torch.from_numpy(np.repeat(out, 8, 0)), a[:8], False, torch.log(torch.full((4,), 0.5)), layout
    )
    np.testing.assert_allclose(learner_logp.numpy(), expected[:8].numpy(), atol=1e-4)
    want = sum(float(d.entropy()) for d in dists) + float(normal.entropy().sum())
    np.testing.assert_allclose(entropy.numpy(), want, atol=1e-4)
    mode, _ = policy.act(np.zeros((1, 1), np.float32), deterministic=True)
    argmax = [int(out[0, a:b].argmax()) for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
    np.testing.assert_array_equal(mode[0], [*argmax, *out[0, layout.logits :]])


def _setup() -> tuple:
    cfg = dataclasses.replace(preset_for(CUE), fragment_length=16)
    spaces = spaces_for(CUE)
    learner = Learner(PPO(), cfg, spaces, 10**9)
    actor = Actor(cfg, CUE, 4, seed=1)
    actor.set_params(learner.params())
    return cfg, spaces, learner, actor


def test_actions_of_every_kind_travel_as_rows_and_the_actor_s_log_probs_are_the_learner_s() -> None:
    cfg, spaces, learner, actor = _setup()
    fragment = actor.collect()
    assert fragment["actions"].shape == (16, 4, 9) and fragment["actions"].dtype == np.float32
    opened, rejection = open_fragment(
        decode_map(encode_map(fragment), experience_schema(spaces)), spaces, cfg
    )
    assert rejection is None and opened is not None
    obs = torch.from_numpy(opened["obs"][:-1].reshape(-1, spaces.obs_dim))
    with torch.no_grad():
        logp, _, _ = learner.net.evaluate(obs, torch.from_numpy(fragment["actions"].reshape(-1, 9)))
    np.testing.assert_allclose(logp.numpy(), fragment["logprobs"].reshape(-1), atol=1e-5)
    while not learner.ready():
        assert learner.add_fragment(Fragment("w0", actor.version, decode_map(encode_map(actor.collect()))))
    stats = learner.update()
    assert stats and all(np.isfinite(v) for v in stats.values()), stats
    # What the evaluator steps: every row the environment's own action (CueWorld checks contains).
    envs = EnvBatch(CUE, 2, seed=0)
    envs.reset()
    envs.step(fragment["actions"][0, :2])
    envs.close()


def _poison(name: str, actions: np.ndarray) -> None:
    if name == "pick_beyond":
        actions[3, 1, 0] = 4  # Discrete(4, start=1): index 4 is one past it
    elif name == "dial_fraction":
        actions[0, 2, 1] = 1.5
    elif name == "flags_negative":
        actions[7, 0, 3] = -1
    elif name == "push_nan":
        actions[2, 2, 6] = np.nan


@pytest.mark.parametrize(
    ("poison", "reason", "detail"),
    [("pick_beyond", "bad_action", "action key '0': 4 is not one of its 4 values"),
     ("dial_fraction", "bad_action", "action key '1.dial': 1.5 is not one of its 4 values"),
     ("flags_negative", "bad_action", "action key '1.flags': -1 is not one of its 2 values"),
     ("push_nan", "non_finite", "actions has 1 NaN")],
)  # fmt: skip
def test_a_hostile_action_leaf_rejects_its_fragment(poison: str, reason: str, detail: str) -> None:
    cfg, spaces, learner, actor = _setup()
    fragment = {k: np.array(v) for k, v in actor.collect().items()}
    _poison(poison, fragment["actions"])
    wire = decode_map(encode_map(fragment), experience_schema(spaces))
    opened, rejection = open_fragment(wire, spaces, cfg)
    assert opened is None and rejection is not None and rejection.reason == reason, rejection
    assert rejection.detail.startswith(detail), rejection
    before = learner.counters.env_steps
    learner.add_fragment(Fragment("rogue", actor.version, wire))
    assert learner.counters.env_steps == before and learner.counters.rejected[reason] == 1


def test_an_action_row_of_the_wrong_width_is_refused_by_the_schema() -> None:
    _, spaces, _, actor = _setup()
    fragment = actor.collect()
    short = {**fragment, "actions": fragment["actions"][..., :8]}
    with pytest.raises(CodecError, match="actions"):
        decode_map(encode_map(short), experience_schema(spaces))


def test_the_spec_file_carries_the_action_leaves() -> None:
    facts = resolve_env(CUE)
    assert spaces_of(facts) == spaces_for(CUE) and facts.action_dim == 9 and not facts.discrete
    assert [leaf["path"] for leaf in facts.act_leaves] == ["0", "1.dial", "1.flags", "2"]
    with pytest.raises(ValueError, match=r"action_dim must be the act_leaves' columns \(9\)"):
        dataclasses.replace(facts, action_dim=8).validate()
    plain: ResolvedEnv = resolve_env(EnvRef("CartPole-v1"))
    assert plain.act_leaves == () and plain.discrete


def test_es_takes_every_action_kind_and_solves_cue_world_with_tuple_actions() -> None:
    """ES's deterministic policies: the argmax of each categorical column's outputs, the Gaussian
    outputs as they are. CueWorld with its cue one-hot in a Box (ES takes one Box) and Tuple
    actions, serial harness, 8 agents, 20k steps: 10 seeds (0-9) scored min 31.94, median 31.97 of
    32 (random 12.5), ~2 s each; the bar sits halfway from random to that."""
    ref = EnvRef("cue_world:CueWorld-v0", {"actions": "tuple", "obs": "box", "note": False})
    spaces = spaces_for(ref)
    spec = PolicySpec.from_config(es_preset(ref), spaces)
    assert spec.outputs == spaces.head_dim == 18 and spec.layer_shapes[-1] == (18, 64)
    outputs = np.random.default_rng(0).normal(size=(3, 18)).astype(np.float32)
    rows = to_actions(spec, outputs)
    offsets = np.cumsum((0, *spaces.action_layout.nvec))
    for k, (a, b) in enumerate(zip(offsets[:-1], offsets[1:], strict=True)):
        np.testing.assert_array_equal(rows[:, k], outputs[:, a:b].argmax(-1))
    np.testing.assert_array_equal(rows[:, 5:], outputs[:, 14:])
    with contextlib.redirect_stdout(io.StringIO()):
        final = es_train(es_preset(ref), ref, 20_000, 8, 0, 20_000)
    assert final >= 22.0, final

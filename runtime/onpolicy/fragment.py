"""The fragment an actor sends: its tensors (checked by the protocol against the schema), and
what the learner checks before it trusts one: that the tensors fit together and that every value
is one an honest actor could have sent. A fragment that fails is rejected whole. Image
observations travel as new frames (frames.py); `open_fragment` rebuilds their stacks first."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from surreal.protocol.codec import TensorSpec
from surreal.runtime.envs import obs_leaves
from surreal.runtime.envs.make import EnvSpaces, spaces_of
from surreal.runtime.envs.obs_leaves import ObsLeaf
from surreal.runtime.envs.ref import ResolvedEnv
from surreal.runtime.onpolicy.config import OnPolicyConfig
from surreal.runtime.onpolicy.frames import stacks_problem, wire_names, with_stacks


def obs_stats_dim(spaces: EnvSpaces) -> int:
    """Length of the observation statistics: images are scaled in the CNN and never normalized;
    of observations of several leaves, the vector leaves alone are (obs_leaves.py)."""
    if spaces.structured:
        return obs_leaves.float_width(spaces.obs_leaves)
    return 0 if spaces.pixels else spaces.obs_dim


def _obs_schema(spaces: EnvSpaces) -> dict[str, TensorSpec]:
    """Observations [T+1, N, ...] (row T bootstraps): float32 vectors as they are (normalized);
    uint8 images [C, H, W] as frames.py sends them: the newest frame of every step, and the older
    C-1 frames of the K' stacks that are not the previous step's shifted by one frame, at (t, n)."""
    if spaces.structured:
        return _leaf_schema(spaces.obs_leaves)
    if spaces.image_shape is None:
        return {"obs": TensorSpec("float32", (None, None, spaces.obs_dim))}
    c, h, w = spaces.image_shape
    return {
        "obs_frames": TensorSpec("uint8", (None, None, h, w)),  # [T+1, N, H, W]
        "obs_keys": TensorSpec("uint8", (None, c - 1, h, w)),  # [K', C-1, H, W]
        "obs_key_index": TensorSpec("int64", (None, 2)),  # [K', 2], row-major order
    }


def _leaf_schema(leaves: tuple[ObsLeaf, ...]) -> dict[str, TensorSpec]:
    """Each leaf [T+1, N, ...] in its own dtype (`obs.<path>`), an image leaf as frames.py sends
    images, and each leaf's truncated final observations [K, ...] (`trunc_obs.<path>`)."""
    out = {}
    for leaf in leaves:
        if leaf.kind == "image":
            c, h, w = leaf.shape
            frames, keys, index = wire_names(leaf.name)
            out[frames] = TensorSpec("uint8", (None, None, h, w))
            out[keys] = TensorSpec("uint8", (None, c - 1, h, w))
            out[index] = TensorSpec("int64", (None, 2))
        else:
            out[leaf.name] = TensorSpec(leaf.dtype, (None, None, *leaf.shape))
        out[f"trunc_{leaf.name}"] = TensorSpec(leaf.dtype, (None, *leaf.shape))
    return out


def experience_schema(spaces: EnvSpaces) -> dict[str, TensorSpec]:
    """The tensors of one fragment: T steps of N envs, K truncations, E finished episodes.
    Observations are float32 vectors [D], or uint8 images [C, H, W] (never float on the wire)."""
    a, s = spaces.action_dim, obs_stats_dim(spaces)
    obs_dtype = "uint8" if spaces.pixels else "float32"
    obs = tuple(spaces.obs_shape)
    actions = TensorSpec("int64", (None, None)) if spaces.discrete else TensorSpec("float32", (None, None, a))
    trunc = {} if spaces.structured else {"trunc_obs": TensorSpec(obs_dtype, (None, *obs))}
    return {
        **_obs_schema(spaces),
        "actions": actions,  # [T, N] or [T, N, A], unclipped samples (act_leaves: rows)
        "logprobs": TensorSpec("float32", (None, None)),  # behaviour policy log-probs [T, N]
        "rewards": TensorSpec("float32", (None, None)),  # raw rewards [T, N]
        "terminated": TensorSpec("bool", (None, None)),
        "truncated": TensorSpec("bool", (None, None)),
        "trunc_index": TensorSpec("int64", (None, 2)),  # (t, n) of each truncated step [K, 2]
        # their final observations, normalized; images as whole stacks (time limits only: rare)
        **trunc,
        "obs_count": TensorSpec("float64", (1,)),  # moments of the raw observations seen
        "obs_mean": TensorSpec("float64", (s,)),
        "obs_m2": TensorSpec("float64", (s,)),
        "ret_count": TensorSpec("float64", (1,)),  # moments of the running discounted returns
        "ret_mean": TensorSpec("float64", (1,)),
        "ret_m2": TensorSpec("float64", (1,)),
        "episode_returns": TensorSpec("float64", (None,)),  # of episodes finished in the fragment
        "episode_lengths": TensorSpec("int64", (None,)),
    }


# Why the learner rejects a whole fragment (counted per reason in status and TensorBoard).
REJECT_REASONS = (
    "malformed",  # tensors whose shapes do not fit together, or image frames that rebuild no stacks
    "non_finite",  # NaN or infinity in any float tensor
    "bad_action",  # a discrete action (or categorical column of one) that is not a whole number in [0, n)
    "out_of_range",  # a reward beyond max_abs_reward, a normalized observation beyond obs_clip,
    #   an episode length < 1 or a return its length cannot produce
    "bad_moments",  # normalization moments with the wrong count, negative m2, or impossible values
    "non_finite_targets",  # values, advantages or returns the learner computed are not finite
)

_FLOAT_TENSORS = ("obs", "logprobs", "rewards", "trunc_obs", "obs_count", "obs_mean", "obs_m2",
                  "ret_count", "ret_mean", "ret_m2", "episode_returns")  # fmt: skip


class Rejection(NamedTuple):
    reason: str  # one of REJECT_REASONS
    detail: str  # for the log


def open_fragment(
    t: dict[str, np.ndarray], spaces: EnvSpaces, cfg: OnPolicyConfig
) -> tuple[dict[str, np.ndarray], None] | tuple[None, Rejection]:
    """The fragment as the learner trains on it (image stacks rebuilt into `obs` [T+1, N, C, H, W]
    before anything reads them; leaves checked, then packed into `obs` [T+1, N, W] and `trunc_obs`)
    and None; or None and why the learner must not train on it."""
    if spaces.structured:
        opened = _open_leaves(t, spaces.obs_leaves, cfg)
        if isinstance(opened, Rejection):
            return None, opened
        t = opened
    elif spaces.image_shape is not None:
        problem = stacks_problem(t, spaces.image_shape)
        if problem is not None:
            return None, Rejection("malformed", problem)
        t = with_stacks(t)
    rejection = check_fragment(t, spaces, cfg)
    return (t, None) if rejection is None else (None, rejection)


def _open_leaves(
    t: dict[str, np.ndarray], leaves: tuple[ObsLeaf, ...], cfg: OnPolicyConfig
) -> dict[str, np.ndarray] | Rejection:
    """A fragment of observations of several leaves with its image leaf's stacks rebuilt, every
    leaf checked as what it is (obs_leaves.value_problem) and packed into the networks' rows:
    `obs` [T+1, N, W] and `trunc_obs` [K, W]. Or why it is rejected."""
    for leaf in leaves:
        if leaf.kind == "image":
            problem = stacks_problem(t, leaf.shape, leaf.name)
            if problem is not None:
                return Rejection("malformed", problem)
            t = with_stacks(t, leaf.name)
    steps, envs = t["rewards"].shape
    kept = len(t["trunc_index"])
    clip = cfg.obs_clip if cfg.norm_obs else None
    for leaf in leaves:
        obs, trunc = t[leaf.name], t[f"trunc_{leaf.name}"]
        if obs.shape[:2] != (steps + 1, envs) or len(trunc) != kept:
            return Rejection("malformed", f"{leaf.name} {obs.shape} / trunc_{leaf.name} {trunc.shape} do not "
                             f"fit rewards {(steps, envs)} and {kept} truncations")  # fmt: skip
        for name, values in ((leaf.name, obs), (f"trunc_{leaf.name}", trunc)):
            found = obs_leaves.value_problem(leaf, name, values, clip)
            if found is not None:
                return Rejection(*found)
    names = {leaf.name for leaf in leaves} | {f"trunc_{leaf.name}" for leaf in leaves}
    out = {k: v for k, v in t.items() if k not in names}
    out["obs"] = obs_leaves.pack(leaves, {leaf.name: t[leaf.name] for leaf in leaves})
    out["trunc_obs"] = obs_leaves.pack(leaves, {leaf.name: t[f"trunc_{leaf.name}"] for leaf in leaves})
    return out


def check_fragment(t: dict[str, np.ndarray], spaces: EnvSpaces, cfg: OnPolicyConfig) -> Rejection | None:
    """Why the learner must not train on a fragment (its image stacks rebuilt: open_fragment), or
    None. The protocol has checked each wire tensor's dtype and rank against the experience schema;
    this checks that they fit together and that every value is one an honest actor with this
    config could have sent."""
    problem = _shape_problem(t)
    if problem is not None:
        return Rejection("malformed", problem)
    floats = [*_FLOAT_TENSORS, *(() if spaces.discrete else ("actions",))]
    if spaces.pixels:  # uint8 images: every value is a pixel
        floats = [name for name in floats if name not in ("obs", "trunc_obs")]
    for name in floats:
        if not np.isfinite(t[name]).all():
            return Rejection("non_finite", f"{name} has {np.size(t[name]) - np.isfinite(t[name]).sum()} "
                             "NaN or infinite values")  # fmt: skip
    if (
        spaces.discrete
        and t["actions"].size
        and not (0 <= t["actions"].min() and t["actions"].max() < spaces.action_dim)
    ):
        return Rejection("bad_action", f"actions outside [0, {spaces.action_dim})")
    if spaces.structured_actions:
        problem = spaces.action_layout.categorical_problem(t["actions"])
        if problem is not None:
            return Rejection("bad_action", problem)
    problem = _range_problem(t, cfg, leaves_checked=spaces.structured)
    if problem is not None:
        return Rejection("out_of_range", problem)
    problem = _moments_problem(t, cfg)
    if problem is not None:
        return Rejection("bad_moments", problem)
    return None


def _shape_problem(t: dict[str, np.ndarray]) -> str | None:
    steps, envs = t["rewards"].shape
    if steps < 1 or envs < 1:
        return f"empty fragment {t['rewards'].shape}"
    if t["obs"].shape[:2] != (steps + 1, envs):
        return f"obs {t['obs'].shape} does not match rewards {(steps, envs)}"
    for name in ("actions", "logprobs", "terminated", "truncated"):
        if t[name].shape[:2] != (steps, envs):
            return f"{name} {t[name].shape} does not match rewards {(steps, envs)}"
    idx = t["trunc_index"]
    if len(idx) != len(t["trunc_obs"]) or len(t["episode_returns"]) != len(t["episode_lengths"]):
        return "trunc_index/trunc_obs or episode_returns/episode_lengths differ in length"
    if len(idx) and (idx.min() < 0 or idx[:, 0].max() >= steps or idx[:, 1].max() >= envs):
        return "trunc_index out of range"
    if not t["truncated"][idx[:, 0], idx[:, 1]].all() or len(idx) != t["truncated"].sum():
        return "trunc_index does not list exactly the truncated steps"
    if (t["terminated"] & t["truncated"]).any():
        return "a step both terminated and truncated"
    return None


def _range_problem(t: dict[str, np.ndarray], cfg: OnPolicyConfig, leaves_checked: bool = False) -> str | None:
    limit = cfg.max_abs_reward
    if t["rewards"].size and np.abs(t["rewards"]).max() > limit:
        return f"a reward of {np.abs(t['rewards']).max():.3g} (max_abs_reward is {limit:g})"
    # Actors send observations normalized and clipped to obs_clip (leaves: _open_leaves checks each).
    if cfg.norm_obs and not leaves_checked:
        bound = cfg.obs_clip * (1 + 1e-6)
        for name in ("obs", "trunc_obs"):
            if t[name].size and np.abs(t[name]).max() > bound:
                return f"normalized {name} beyond obs_clip={cfg.obs_clip:g}"
    lengths = t["episode_lengths"]
    if len(lengths) and (lengths.min() < 1 or (np.abs(t["episode_returns"]) > limit * lengths).any()):
        return "an episode length < 1, or a return beyond max_abs_reward x its length"
    return None


def _moments_problem(t: dict[str, np.ndarray], cfg: OnPolicyConfig) -> str | None:
    """Actors send the moments of what they saw in the fragment: exactly T x N samples of each
    statistic in use, none of one that is not. Running discounted returns are bounded by
    max_abs_reward / (1 - gamma), and so are their mean and std."""
    samples = float(t["rewards"].size)
    for prefix, used in (("obs", cfg.norm_obs), ("ret", cfg.norm_reward)):
        count = t[f"{prefix}_count"][0]
        if count != (samples if used else 0.0):
            return f"{prefix}_count is {count:g}, expected {samples if used else 0:g}"
        if (t[f"{prefix}_m2"] < 0).any():
            return f"{prefix}_m2 is negative"
    if cfg.norm_reward and cfg.gamma < 1:
        bound = cfg.max_abs_reward / (1 - cfg.gamma)
        mean, var = abs(t["ret_mean"][0]), t["ret_m2"][0] / samples
        if mean > bound or var > bound**2:
            return (
                f"discounted-return moments (mean {mean:.3g}, var {var:.3g}) beyond what rewards "
                f"within max_abs_reward can produce"
            )
    return None


def fragment_bytes(cfg: OnPolicyConfig, resolved: ResolvedEnv, agents_in_worker: int) -> int:
    """The bytes of the fragment a worker of `agents_in_worker` agents sends, give or take its
    truncations and episode results beyond one per env: per env, T+1 rows of observations and T of
    action, log-prob, reward and the two done flags. An image row (frames.py) is bounded by a key's:
    the new frame, the other C-1 and its (t, n). Most rows are the new frame alone (Breakout's
    fragments are ~4x smaller: benchmarks/pixel_bytes.py), but no episode length is promised."""
    n, t = agents_in_worker * cfg.envs_per_agent, cfg.fragment_length
    pixels = resolved.image_shape is not None
    obs = resolved.obs_dim * (1 if pixels else 4)
    row = obs + (2 * 8 if pixels else 0)  # a key's obs_key_index entry
    if resolved.obs_leaves:  # each leaf in its own dtype; an image leaf as frames.py sends it
        leaves = spaces_of(resolved).keep(cfg.obs_keys).obs_leaves
        obs = sum(leaf.width * np.dtype(leaf.dtype).itemsize for leaf in leaves)
        row = obs + (2 * 8 if any(leaf.kind == "image" for leaf in leaves) else 0)
    action = 8 if resolved.discrete else 4 * resolved.action_dim
    return n * (t + 1) * row + n * t * (action + 4 + 4 + 1 + 1) + n * (obs + 8 * 3)

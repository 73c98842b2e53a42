"""The on-policy actor: steps a batch of envs with the latest policy and cuts the experience into fragments.

`Actor` is the core (no networking; the serial harness and tests drive it directly);
runtime/actor.py runs it as every family's actor is run. Actors run the policy in numpy
(policy.py) and never import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from surreal.protocol.client import ExperienceStream
from surreal.protocol.types import Params
from surreal.runtime import actor, hooks
from surreal.runtime.actor import actor_seed
from surreal.runtime.envs import obs_leaves
from surreal.runtime.envs.make import EnvBatch, EnvSpaces
from surreal.runtime.envs.ref import EnvRef
from surreal.runtime.normalization import (
    ObsNormalizer,
    RunningMeanStd,
    batch_moments,
    discounted_return_trace,
)
from surreal.runtime.onpolicy.config import OnPolicyConfig
from surreal.runtime.onpolicy.fragment import obs_stats_dim
from surreal.runtime.onpolicy.frames import encode_stacks
from surreal.runtime.onpolicy.policy import NumpyPolicy, policy_from_params
from surreal.runtime.run import RunContext

if TYPE_CHECKING:
    from surreal.algorithms.api import OnPolicy


class Actor:
    """Runs the policy on a whole EnvBatch at once; emits fragments of `fragment_length` steps.

    `seed` seeds the envs ([seed, seed + num_envs)) and the policy's sampling; `algo` gives the
    policy (the runtime's without one).
    """

    def __init__(
        self, cfg: OnPolicyConfig, env: EnvRef | str, num_envs: int, seed: int, algo: OnPolicy | None = None
    ) -> None:
        self.cfg, self.algo = cfg, algo
        self.envs = EnvBatch(env, num_envs, seed, obs_keys=cfg.obs_keys)
        self.spaces = self.envs.spaces
        self.rng = np.random.default_rng(seed)
        self.policy: NumpyPolicy | None = None  # set by set_params
        self.version = -1  # no parameters yet
        self._normalizer: ObsNormalizer | None = None
        self._obs = self.envs.reset()
        self._running_return = np.zeros(num_envs, np.float64)

    def set_params(self, params: Params) -> None:
        self.policy, self._normalizer = policy_from_params(self.cfg, self.spaces, params, self.rng, self.algo)
        self.version = params.version

    def collect(self) -> dict[str, np.ndarray]:
        """Step every env `fragment_length` times with the current policy; return the fragment as
        it travels (fragment.experience_schema: images as new frames, frames.py)."""
        cfg, sp, policy = self.cfg, self.spaces, self.policy
        if policy is None:
            raise RuntimeError("collect() before set_params(): the actor has no policy yet")
        t_len, n = cfg.fragment_length, self.envs.num_envs
        track = (LeafRows if sp.structured else BoxRows)(sp, t_len, n, self._normalizer)
        act_shape = (t_len, n) if sp.discrete else (t_len, n, sp.action_dim)
        actions = np.empty(act_shape, np.int64 if sp.discrete else np.float32)
        logprobs = np.empty((t_len, n), np.float32)
        rewards = np.empty((t_len, n), np.float32)
        terminated = np.empty((t_len, n), bool)
        truncated = np.empty((t_len, n), bool)
        trunc_index: list[tuple[int, int]] = []
        trunc_obs: list[Any] = []
        ep_returns: list[float] = []
        ep_lengths: list[int] = []
        cur = self._obs
        for t in range(t_len):
            actions[t], logprobs[t] = self.act(policy, track.store(t, cur), actions[t])
            res = self.envs.step(actions[t])
            rewards[t] = res.rewards
            terminated[t] = res.terminated
            truncated[t] = res.truncated
            if res.trunc_envs:
                trunc_index += [(t, i) for i in res.trunc_envs]
                trunc_obs += res.trunc_obs
            if res.episode_returns:
                ep_returns += res.episode_returns
                ep_lengths += res.episode_lengths
            cur = res.obs
        self._obs = cur
        track.store(t_len, cur)
        return {
            **track.wire(trunc_obs),
            "actions": actions,
            "logprobs": logprobs,
            "rewards": rewards,
            "terminated": terminated,
            "truncated": truncated,
            "trunc_index": np.array(trunc_index, np.int64).reshape(-1, 2),
            **self._moments(track.raw, rewards, terminated | truncated),
            "episode_returns": np.array(ep_returns, np.float64),
            "episode_lengths": np.array(ep_lengths, np.int64),
        }

    def act(self, policy: NumpyPolicy, obs: np.ndarray, like: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The policy's actions (of `like`'s shape and kind) and their log-probabilities for `obs`;
        from an algorithm's policy, anything else fails the role as the algorithm's (hooks.py), not
        as a crash of surreal's."""
        if self.algo is None:
            return policy.act(obs)
        out = hooks.call(self.algo, "policy", policy.act, obs)
        try:
            found, logp = (np.asarray(x) for x in out)
        except (TypeError, ValueError):
            raise hooks.failed(self.algo, "policy", f"act returned {type(out).__name__}, not (actions, "
                               "log-probabilities)") from None  # fmt: skip
        n = len(like)
        if found.shape != like.shape or found.dtype.kind != like.dtype.kind or logp.shape != (n,):
            raise hooks.failed(self.algo, "policy", f"act returned {found.dtype}{list(found.shape)} and "
                               f"{logp.dtype}{list(logp.shape)} for {n} observations: "
                               f"{like.dtype}{list(like.shape)} and float32[{n}] expected")  # fmt: skip
        return found, logp

    def _moments(self, raw_obs: np.ndarray, rewards: np.ndarray, dones: np.ndarray) -> dict[str, np.ndarray]:
        """Moment deltas the learner merges into its normalization statistics (empty if unused)."""
        cfg, d = self.cfg, obs_stats_dim(self.spaces)
        obs_rms, ret_rms = RunningMeanStd((d,)), RunningMeanStd((1,))
        if cfg.norm_obs:
            obs_rms.merge(batch_moments(raw_obs.reshape(rewards.size, d)))
        if cfg.norm_reward:
            trace, self._running_return = discounted_return_trace(
                rewards, dones, self._running_return, cfg.gamma
            )
            ret_rms.merge(batch_moments(trace.reshape(-1, 1)))
        return {**obs_rms.to_arrays("obs"), **ret_rms.to_arrays("ret")}

    def work(self, stream: ExperienceStream) -> bool:
        stream.send(self.version, self.collect())
        return True

    def close(self) -> None:
        self.envs.close()


class BoxRows:
    """A fragment's observations of one Box: [T+1, N, ...] as the policy takes them (normalized
    vectors, or uint8 images sent as new frames), and the raw vectors [T, N, D] whose moments go
    to the learner."""

    def __init__(self, sp: EnvSpaces, t_len: int, n: int, norm: ObsNormalizer | None) -> None:
        self.sp, self.norm, self.t_len = sp, norm, t_len
        self.obs = np.empty((t_len + 1, n, *sp.obs_shape), sp.obs_dtype)  # row t_len: bootstrap
        self.raw = self.obs[:t_len] if norm is None else np.empty((t_len, n, sp.obs_dim), np.float32)

    def store(self, t: int, cur: Any) -> np.ndarray:
        """Row `t` from the batch's observations `cur`; what the policy takes."""
        if self.norm is None:  # raw is a view of these rows
            self.obs[t] = cur
            return self.obs[t]
        if t < self.t_len:
            self.raw[t] = cur
        return self.norm(cur, out=self.obs[t])

    def wire(self, trunc_obs: list[np.ndarray]) -> dict[str, np.ndarray]:
        sp = self.sp
        trunc = np.array(trunc_obs, sp.obs_dtype).reshape(-1, *sp.obs_shape)
        if self.norm is not None:
            trunc = self.norm(trunc)
        return {**(encode_stacks(self.obs) if sp.pixels else {"obs": self.obs}), "trunc_obs": trunc}


class LeafRows:
    """A fragment's observations of several leaves (obs_leaves.py): each leaf [T+1, N, ...], its
    vector leaves normalized, the policy given packed rows; the raw vector leaves [T, N, D] side by
    side for the moments."""

    def __init__(self, sp: EnvSpaces, t_len: int, n: int, norm: ObsNormalizer | None) -> None:
        self.leaves, self.norm, self.t_len = sp.obs_leaves, norm, t_len
        self.obs = obs_leaves.empty(self.leaves, t_len + 1, n)
        self.raw = np.empty((t_len, n, obs_stats_dim(sp)), np.float32)

    def _normalize(self, rows: dict[str, np.ndarray]) -> np.ndarray:
        block = obs_leaves.float_block(self.leaves, rows)
        if self.norm is not None and block.shape[-1]:
            obs_leaves.set_float_block(self.leaves, rows, self.norm(block))
        return block

    def store(self, t: int, cur: Any) -> np.ndarray:
        row = {name: array[t] for name, array in self.obs.items()}  # views into the fragment
        for name, array in cur.items():
            row[name][...] = array
        block = self._normalize(row)
        if t < self.t_len:
            self.raw[t] = block
        return obs_leaves.pack(self.leaves, row)

    def wire(self, trunc_obs: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        trunc = obs_leaves.stack(trunc_obs, self.leaves)
        self._normalize(trunc)
        out: dict[str, np.ndarray] = {}
        for leaf in self.leaves:
            if leaf.kind == "image":
                out.update(encode_stacks(self.obs[leaf.name], leaf.name))
            else:
                out[leaf.name] = self.obs[leaf.name]
            out[f"trunc_{leaf.name}"] = trunc[leaf.name]
        return out


def run_actor(algo: OnPolicy, cfg: OnPolicyConfig, ctx: RunContext) -> int:
    """Send fragments to the learner rank that serves this worker until the run is done
    (runtime/actor.py); a fragment lost in flight is not missed by an on-policy learner."""
    cfg.validate()
    seed = actor_seed(ctx.seed, ctx.index)
    return actor.run_actor(Actor(cfg, ctx.env, ctx.agents_in_worker * cfg.envs_per_agent, seed, algo), ctx)

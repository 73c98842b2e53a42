"""PPO actor: steps a batch of envs with the latest policy and cuts the experience into fragments.

`PPOActor` is the core (no networking; the serial harness and tests drive it directly);
`run_actor` connects it to the learner. Actors run the policy in numpy (policy.py) and never
import torch.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from surreal.algorithms.common.env_ref import EnvRef
from surreal.algorithms.common.envs import EnvBatch
from surreal.algorithms.common.normalization import (
    ObsNormalizer,
    RunningMeanStd,
    batch_moments,
    discounted_return_trace,
)
from surreal.algorithms.common.reconnect import work_connected
from surreal.algorithms.common.run import RunContext, extras_done
from surreal.algorithms.ppo.config import PPOConfig
from surreal.algorithms.ppo.fragment import obs_stats_dim
from surreal.algorithms.ppo.frames import encode_stacks
from surreal.algorithms.ppo.policy import NumpyPolicy, policy_from_params
from surreal.protocol.client import ExperienceStream, LearnerClient
from surreal.protocol.types import Params

log = logging.getLogger(__name__)

PROGRESS_LOG_SECONDS = 30.0  # how often an actor logs what it has sent


class PPOActor:
    """Runs the policy on a whole EnvBatch at once; emits fragments of `fragment_length` steps.

    `seed` seeds the envs ([seed, seed + num_envs)) and the policy's sampling.
    """

    def __init__(self, cfg: PPOConfig, env: EnvRef | str, num_envs: int, seed: int) -> None:
        self.cfg = cfg
        self.envs = EnvBatch(env, num_envs, seed)
        self.spaces = self.envs.spaces
        self.rng = np.random.default_rng(seed)
        self.policy: NumpyPolicy | None = None  # set by set_params
        self.version = -1  # no parameters yet
        self._normalizer: ObsNormalizer | None = None
        self._obs = self.envs.reset()
        self._running_return = np.zeros(num_envs, np.float64)

    def set_params(self, params: Params) -> None:
        self.policy, self._normalizer = policy_from_params(self.cfg, self.spaces, params, self.rng)
        self.version = params.version

    def collect(self) -> dict[str, np.ndarray]:
        """Step every env `fragment_length` times with the current policy; return the fragment as
        it travels (fragment.experience_schema: images as new frames, frames.py)."""
        cfg, sp, policy = self.cfg, self.spaces, self.policy
        if policy is None:
            raise RuntimeError("collect() before set_params(): the actor has no policy yet")
        t_len, n = cfg.fragment_length, self.envs.num_envs
        norm = self._normalizer
        obs = np.empty((t_len + 1, n, *sp.obs_shape), sp.obs_dtype)  # row t_len: bootstrap
        raw = obs if norm is None else np.empty((t_len, n, sp.obs_dim), np.float32)
        act_shape = (t_len, n) if sp.discrete else (t_len, n, sp.action_dim)
        actions = np.empty(act_shape, np.int64 if sp.discrete else np.float32)
        logprobs = np.empty((t_len, n), np.float32)
        rewards = np.empty((t_len, n), np.float32)
        terminated = np.empty((t_len, n), bool)
        truncated = np.empty((t_len, n), bool)
        trunc_index: list[tuple[int, int]] = []
        trunc_obs: list[np.ndarray] = []
        ep_returns: list[float] = []
        ep_lengths: list[int] = []
        cur = self._obs
        for t in range(t_len):
            raw[t] = cur
            if norm is not None:
                norm(cur, out=obs[t])
            a, logprobs[t] = policy.act(obs[t])
            actions[t] = a
            res = self.envs.step(a)
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
        obs[t_len] = cur if norm is None else norm(cur)
        tr_obs = np.array(trunc_obs, sp.obs_dtype).reshape(-1, *sp.obs_shape)
        if norm is not None:
            tr_obs = norm(tr_obs)
        return {
            **(encode_stacks(obs) if sp.pixels else {"obs": obs}),  # images: each new frame once
            "actions": actions,
            "logprobs": logprobs,
            "rewards": rewards,
            "terminated": terminated,
            "truncated": truncated,
            "trunc_index": np.array(trunc_index, np.int64).reshape(-1, 2),
            "trunc_obs": tr_obs,
            **self._moments(raw[:t_len], rewards, terminated | truncated),
            "episode_returns": np.array(ep_returns, np.float64),
            "episode_lengths": np.array(ep_lengths, np.int64),
        }

    def _moments(self, raw_obs: np.ndarray, rewards: np.ndarray, dones: np.ndarray) -> dict[str, np.ndarray]:
        """Moment deltas the learner merges into its normalization statistics (empty if unused)."""
        cfg, d = self.cfg, obs_stats_dim(self.spaces)
        obs_rms, ret_rms = RunningMeanStd((d,)), RunningMeanStd((1,))
        if cfg.norm_obs:
            obs_rms.merge(batch_moments(raw_obs.reshape(-1, d)))
        if cfg.norm_reward:
            trace, self._running_return = discounted_return_trace(
                rewards, dones, self._running_return, cfg.gamma
            )
            ret_rms.merge(batch_moments(trace.reshape(-1, 1)))
        return {**obs_rms.to_arrays("obs"), **ret_rms.to_arrays("ret")}

    def close(self) -> None:
        self.envs.close()


def actor_seed(ctx: RunContext) -> int:
    """Distinct env seeds per worker: worker i's envs use [seed_i, seed_i + num_envs)."""
    return ctx.seed * 1_000_003 + 10_007 * (ctx.index + 1)


def run_actor(cfg: PPOConfig, ctx: RunContext) -> int:
    """Collect and send fragments until the learner's parameters say the run is done (exit 0).

    A lost learner (restart, network) is retried with backoff (`work_connected`); the fragment
    in flight is lost, which on-policy PPO does not miss.
    """
    cfg.validate()
    actor = PPOActor(cfg, ctx.env, ctx.agents_in_worker * cfg.envs_per_agent, actor_seed(ctx))
    client = LearnerClient(ctx.learner_for(ctx.index), ctx.token)

    def connected() -> None:
        log.info(
            "actor-%d connected to the learner at %s: %d agents, %d envs of %s",
            ctx.index, ctx.learner_for(ctx.index), ctx.agents_in_worker, actor.envs.num_envs, ctx.env_id,
        )  # fmt: skip

    try:
        return work_connected(
            client, f"actor-{ctx.index}", lambda stream: _send_until_done(client, stream, actor),
            on_connect=connected,
        )  # fmt: skip
    finally:
        client.close()
        actor.close()


def _send_until_done(client: LearnerClient, stream: ExperienceStream, actor: PPOActor) -> int:
    sent, next_report = 0, time.monotonic() + PROGRESS_LOG_SECONDS
    while True:
        if time.monotonic() >= next_report:
            log.info("sent %d fragments; policy version %d", sent, actor.version)
            next_report = time.monotonic() + PROGRESS_LOG_SECONDS
        # The credits say which version is current: ask only when it is not the one held (or when
        # the learner has not said). The answer then carries the weights.
        params = client.get_params(actor.version) if stream.latest_version != actor.version else None
        if params is not None:
            actor.set_params(params)
            if extras_done(params.extras):
                return 0
        if actor.version < 0:  # the learner has not published yet
            time.sleep(0.2)
            continue
        stream.send(actor.version, actor.collect())
        sent += 1

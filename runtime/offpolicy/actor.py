"""The off-policy actor: steps its envs with the latest policy (the algorithm's, api.OffPolicy.policy;
uniform random actions for its share of `random_steps` first) and inserts the transitions into its
replay shard, over the shard's experience stream (its credits: a shard whose rate limiter holds
inserts makes the actor wait). Parameters come from the learner. No torch here.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import numpy as np

from surreal.protocol.client import ExperienceStream, LearnerClient, ProtocolError
from surreal.protocol.types import Params
from surreal.runtime import hooks
from surreal.runtime.envs.make import EnvBatch
from surreal.runtime.envs.ref import EnvRef
from surreal.runtime.offpolicy import obs
from surreal.runtime.offpolicy.config import OffPolicyConfig
from surreal.runtime.offpolicy.policy import Policy, random_actions, to_env
from surreal.runtime.onpolicy.actor import PROGRESS_LOG_SECONDS, actor_seed
from surreal.runtime.reconnect import GIVE_UP_SECONDS, work_connected
from surreal.runtime.run import RunContext, extras_done, extras_env_steps

if TYPE_CHECKING:
    from surreal.algorithms.api import OffPolicy

log = logging.getLogger(__name__)


class Actor:
    """Fragments of `fragment_length` steps of `num_envs` envs, as rows: the observation's fields
    (obs.py), action (in [-1, 1] for a Box, an index for a Discrete), reward, the next observation's
    fields (the final observation where an episode was cut by a time limit), terminated; and the
    returns of the episodes that ended."""

    def __init__(self, algo: OffPolicy, cfg: OffPolicyConfig, env: EnvRef | str, num_envs: int, seed: int,
                 random_steps: int, total_steps: int) -> None:  # fmt: skip
        self.algo, self.cfg = algo, cfg
        self.envs = EnvBatch(env, num_envs, seed, obs_keys=cfg.obs_keys)
        self.spaces = self.envs.spaces
        self.rng = np.random.default_rng(seed)
        self.policy: Policy | None = None
        self.version = -1
        self.steps, self.random_steps = 0, random_steps
        self.total_steps, self.progress = max(1, total_steps), 0.0  # the run's share done, by the learner
        self._obs = self.envs.reset()

    def set_params(self, params: Params) -> None:
        self.policy = hooks.call(self.algo, "policy", self.algo.policy, self.cfg, self.spaces,
                                 params.weights, self.rng)  # fmt: skip
        self.version = params.version
        if "env_steps" in params.extras:  # the learner's count: the run's clock (an exploration schedule's)
            self.progress = min(1.0, extras_env_steps(params.extras) / self.total_steps)

    def collect(self) -> dict[str, np.ndarray]:
        t_len, n, sp = self.cfg.fragment_length, self.envs.num_envs, self.spaces
        out = {name: np.empty((t_len, n, *shape), dtype) for name, (dtype, shape) in obs.fields(sp).items()}
        dtype, shape = obs.transition_fields(sp)["actions"]
        actions = np.empty((t_len, n, *shape), dtype)
        rewards = np.empty((t_len, n), np.float32)
        terminated = np.empty((t_len, n), bool)
        returns: list[float] = []
        for t in range(t_len):
            for name, array in obs.as_fields(sp, self._obs).items():
                out[name][t] = array
            if self.steps < self.random_steps or self.policy is None:
                actions[t] = random_actions(sp, n, self.rng)
            else:
                actions[t] = self.act(obs.policy_rows(sp, self._obs), actions.dtype, actions.shape[1:])
            res = self.envs.step(to_env(actions[t], sp))
            rewards[t], terminated[t] = res.rewards, res.terminated
            for name, array in obs.as_fields(sp, res.obs, obs.NEXT).items():
                out[name][t] = array
            for i, final in zip(res.trunc_envs, res.trunc_obs, strict=True):
                obs.copy_row(sp, out, (t, i), final)
            returns += res.episode_returns
            self._obs = res.obs
            self.steps += n
        rows = t_len * n
        return {**{name: array.reshape(rows, *array.shape[2:]) for name, array in out.items()},
                "actions": actions.reshape(rows, *shape), "rewards": rewards.reshape(rows),
                "terminated": terminated.reshape(rows),
                "episode_returns": np.array(returns, np.float64)}  # fmt: skip

    def act(self, rows: np.ndarray, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """The policy's actions for `rows`, which must be the replay's (`shape`, of `dtype`'s kind):
        anything else fails the role as the algorithm's (hooks.py), not as a crash of surreal's."""
        assert self.policy is not None
        found = np.asarray(hooks.call(self.algo, "policy", self.policy.act, rows, False, self.progress))
        if found.shape != shape or found.dtype.kind != dtype.kind:
            raise hooks.failed(self.algo, "policy", f"act returned {found.dtype}{list(found.shape)} for "
                               f"{len(rows)} observations: {dtype}{list(shape)} is expected")  # fmt: skip
        return found

    def close(self) -> None:
        self.envs.close()


def run_actor(algo: OffPolicy, cfg: OffPolicyConfig, ctx: RunContext) -> int:
    """Insert fragments into shard `index % shards` until the learner's parameters say the run is done."""
    cfg.validate()
    envs = ctx.agents_in_worker * cfg.envs_per_agent
    share = -(-cfg.random_steps * ctx.agents_in_worker // max(1, ctx.num_agents))  # of random_steps
    actor = Actor(algo, cfg, ctx.env, envs, actor_seed(ctx.seed, ctx.index), share, ctx.total_steps)
    learner = LearnerClient(ctx.learner_for(0), ctx.token)
    shard = LearnerClient(ctx.replay_for(ctx.index), ctx.token)

    def work(stream: ExperienceStream) -> int:
        sent, next_report, heard_at = 0, time.monotonic() + PROGRESS_LOG_SECONDS, time.monotonic()
        while True:
            if time.monotonic() >= next_report:
                log.info("sent %d fragments; policy version %d", sent, actor.version)
                next_report = time.monotonic() + PROGRESS_LOG_SECONDS
            try:
                params = learner.get_params(actor.version)
            except ProtocolError as exc:  # the learner (re)starting: not the shard's stream
                if time.monotonic() - heard_at > GIVE_UP_SECONDS:
                    raise
                log.info("learner unreachable (%s); asking again", exc)
                time.sleep(1.0)
                continue
            heard_at = time.monotonic()
            if params is not None:
                actor.set_params(params)
                if extras_done(params.extras):
                    log.info("the run is done after %d fragments: exiting", sent)
                    return 0
            if actor.version < 0:  # the learner has not published yet
                time.sleep(0.2)
                continue
            stream.send(actor.version, actor.collect())
            sent += 1

    def ended() -> bool:
        """The shard went away: the learner says whether the run is over."""
        try:
            params = learner.get_params(-1, timeout=5.0)
        except ProtocolError:
            return False
        return params is not None and extras_done(params.extras)

    log.info("actor-%d: %d envs of %s, inserting into the replay shard at %s", ctx.index, envs,
             ctx.env_id, ctx.replay_for(ctx.index))  # fmt: skip
    try:
        return work_connected(shard, f"actor-{ctx.index}", work, peer="replay shard", ended=ended)
    finally:
        shard.close()
        learner.close()
        actor.close()

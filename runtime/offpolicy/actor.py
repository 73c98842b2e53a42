"""The off-policy actor: steps its envs with the latest policy (the algorithm's, api.OffPolicy.policy;
uniform random actions for its share of `random_steps` first) and inserts the transitions into its
replay shard, over the shard's experience stream (its credits: a shard whose rate limiter holds
inserts makes the actor wait). Parameters come from the learner. No torch here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from surreal.protocol.client import ExperienceStream
from surreal.protocol.types import Params
from surreal.runtime import actor, hooks
from surreal.runtime.actor import actor_seed
from surreal.runtime.envs.make import EnvBatch
from surreal.runtime.envs.ref import EnvRef
from surreal.runtime.offpolicy import obs
from surreal.runtime.offpolicy.config import OffPolicyConfig
from surreal.runtime.offpolicy.policy import Policy, random_actions, to_env
from surreal.runtime.run import RunContext, extras_env_steps

if TYPE_CHECKING:
    from surreal.algorithms.api import OffPolicy


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

    def work(self, stream: ExperienceStream) -> bool:
        stream.send(self.version, self.collect())
        return True

    def close(self) -> None:
        self.envs.close()


def run_actor(algo: OffPolicy, cfg: OffPolicyConfig, ctx: RunContext) -> int:
    """Insert fragments into shard `index % shards` until the learner's parameters say the run is
    done (runtime/actor.py)."""
    cfg.validate()
    envs = ctx.agents_in_worker * cfg.envs_per_agent
    share = -(-cfg.random_steps * ctx.agents_in_worker // max(1, ctx.num_agents))  # of random_steps
    core = Actor(algo, cfg, ctx.env, envs, actor_seed(ctx.seed, ctx.index), share, ctx.total_steps)
    return actor.run_actor(core, ctx, sink=ctx.replay_for(ctx.index))

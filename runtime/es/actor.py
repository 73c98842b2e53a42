"""ES worker: one process hosting `agents_in_worker` logical agents.

Each logical agent owns two environments and evaluates the antithetic pairs the current version
hands it (theta + sigma eps on one, theta - sigma eps on the other, both from the same start
state), one pair after another; all agents' environments step together, their policies in one
batched call. Finished pairs and the moments of their episodes' observations go up the experience
stream every `flush_interval` seconds; a pair whose environment went non-finite is dropped
(`_drop_broken`). Workers are stateless: a restarted worker, or one whose master restarted, simply
fetches the parameters again.
"""

from __future__ import annotations

import logging
import math
import time

import numpy as np

from surreal.protocol.client import ExperienceStream
from surreal.protocol.ratelimit import RejectionLog
from surreal.protocol.types import Params
from surreal.runtime import actor
from surreal.runtime.actor import actor_seed
from surreal.runtime.envs.make import BROKEN_STEPS, EnvFailed, env_spaces, make_env
from surreal.runtime.envs.ref import EnvRef, as_env_ref, their_error
from surreal.runtime.es.config import ESConfig
from surreal.runtime.es.evaluator import normalizer
from surreal.runtime.es.networks import BatchPolicy, PolicySpec
from surreal.runtime.es.noise import env_seed, pair_seed, perturbation
from surreal.runtime.es.results import pack_batch
from surreal.runtime.normalization import ObsNormalizer
from surreal.runtime.run import RunContext

log = logging.getLogger(__name__)

MAX_AGENTS_PER_WORKER = 1 << 20  # agent ids: worker index * this + slot, unique across workers
ACK_WAIT_SECONDS = 2.0  # the longest a worker whose hand-out is done waits for the master to deal
#   with its last results before it fetches the next version (then it fetches anyway)


def agent_ids(index: int, agents_in_worker: int) -> list[int]:
    """Global ids of the logical agents a worker hosts (from its index and their slots)."""
    if not 1 <= agents_in_worker <= MAX_AGENTS_PER_WORKER:
        raise ValueError(f"agents_in_worker must be in [1, {MAX_AGENTS_PER_WORKER}], got {agents_in_worker}")
    return [index * MAX_AGENTS_PER_WORKER + slot for slot in range(agents_in_worker)]


class ESWorker:
    """The worker's core, without networking: set_params(), step() while busy, take_batch()."""

    def __init__(self, cfg: ESConfig, env: EnvRef | str, ids: list[int], seed: int = 0) -> None:
        self.cfg, self.ids = cfg, ids
        n = len(ids)
        self.env = as_env_ref(env)
        try:
            self.envs = [make_env(env, seed + i) for i in range(2 * n)]  # agent a: slots 2a, 2a+1
        except ValueError as exc:  # the user's module or constructor failed (env_ref names it)
            raise EnvFailed(str(exc)) from None
        self.spaces = env_spaces(self.envs[0])
        self.spec = PolicySpec.from_config(cfg, self.spaces)
        self.policy = BatchPolicy(self.spec, 2 * n)
        d = self.spaces.obs_dim
        self._obs = np.zeros((2 * n, d), np.float32)
        self._active = np.zeros(2 * n, bool)
        self._ret = np.zeros(2 * n, np.float64)
        self._len = np.zeros(2 * n, np.int64)
        self._tasks: list[tuple[int, int, int] | None] = [None] * n  # (version, pair, seed)
        self._next_pair = [0] * n
        self._startable = False  # some idle agent may have a pair to start
        self.version, self._nonce, self._pairs, self._theta = -1, 0, 0, np.zeros(0, np.float32)
        self._norm: ObsNormalizer | None = None
        self._rows: list[tuple[int, int, int, int, float, float, int, int]] = []
        # Per environment: sums of the raw observations of its running episode (norm_obs), folded
        # into the batch's moments when its pair finishes, so that they describe exactly the rows.
        self._ep_sum, self._ep_sq = np.zeros((2 * n, d)), np.zeros((2 * n, d))
        self._obs_n, self._obs_sum, self._obs_sq = 0, np.zeros(d), np.zeros(d)
        self.broken_pairs = 0  # pairs dropped for a non-finite observation or reward
        self._broken_in_a_row = 0  # of them since a pair last finished (BROKEN_STEPS)
        self._broken_log = RejectionLog(log, "pair", interval=60.0)

    def set_params(self, params: Params) -> None:
        """Switch to a new version: idle agents start its pairs; running pairs finish first."""
        self.version = params.version
        self._theta = np.array(params.weights["theta"], np.float32)
        self._nonce = int(params.extras["nonce"][0])
        self._pairs = int(params.extras["pairs_per_agent"][0])
        self._norm = normalizer(self.cfg, params)
        self._next_pair = [0] * len(self.ids)
        self._startable = True

    @property
    def busy(self) -> bool:
        """Some environment is mid-episode."""
        return bool(self._active.any())

    def start_idle(self) -> int:
        """Give every idle agent its next pair of the current version; returns how many started."""
        if not self._startable:
            return 0
        self._startable, started = False, 0
        for a, task in enumerate(self._tasks):
            if task is None and self.version >= 0 and self._next_pair[a] < self._pairs:
                self._start(a)
                started += 1
        return started

    def _start(self, a: int) -> None:
        pair = self._next_pair[a]
        self._next_pair[a] += 1
        seed = pair_seed(self._nonce, self.ids[a], pair)
        delta = self.cfg.sigma * perturbation(seed, self.spec.num_params)
        self.policy.set(2 * a, self._theta + delta)
        self.policy.set(2 * a + 1, self._theta - delta)
        try:
            for i in (2 * a, 2 * a + 1):
                self._obs[i] = np.ravel(self.envs[i].reset(seed=env_seed(seed))[0])
        except BaseException as exc:
            raise their_error(self.env, "reset failed", exc, EnvFailed) from None
        pair_slots = slice(2 * a, 2 * a + 2)
        self._active[pair_slots] = True
        self._ret[pair_slots] = 0.0
        self._len[pair_slots] = 0
        self._ep_sum[pair_slots] = 0.0
        self._ep_sq[pair_slots] = 0.0
        self._tasks[a] = (self.version, pair, seed)

    def step(self) -> None:
        """One env step of every running episode, all policies in one batched call."""
        rows = np.flatnonzero(self._active)
        obs = self._obs[rows]
        if self.cfg.norm_obs:  # rows are distinct, so the fancy-indexed += adds each once
            self._ep_sum[rows] += obs
            self._ep_sq[rows] += np.square(obs, dtype=np.float64)
        x = self._norm(obs) if self._norm is not None else obs
        actions = self.policy.act(x, rows if len(rows) < len(self._active) else None)
        acts = self.spaces.env_actions(self.envs[0].action_space, actions)
        for k, i in enumerate(rows.tolist()):
            if not self._active[i]:  # its partner broke earlier in this step
                continue
            try:
                o, r, terminated, truncated, _ = self.envs[i].step(acts[k])
                self._obs[i] = np.ravel(o)
                self._ret[i] += r
            except BaseException as exc:
                raise their_error(self.env, "step failed", exc, EnvFailed) from None
            self._len[i] += 1
            if not (np.isfinite(self._obs[i]).all() and math.isfinite(float(r))):
                self._drop_broken(i // 2)
            elif terminated or truncated:
                self._active[i] = False
                if not self._active[i ^ 1]:  # both episodes of the pair are over
                    self._finish(i // 2)

    def _finish(self, a: int) -> None:
        task = self._tasks[a]
        assert task is not None
        version, pair, seed = task
        p, m = 2 * a, 2 * a + 1
        self._rows.append((self.ids[a], pair, seed, version, float(self._ret[p]), float(self._ret[m]),
                           int(self._len[p]), int(self._len[m])))  # fmt: skip
        if self.cfg.norm_obs:
            self._obs_n += int(self._len[p] + self._len[m])
            self._obs_sum += self._ep_sum[p] + self._ep_sum[m]
            self._obs_sq += self._ep_sq[p] + self._ep_sq[m]
        self._tasks[a] = None
        self._startable = True
        self._broken_in_a_row = 0

    def _drop_broken(self, a: int) -> None:
        """End agent `a`'s pair without a result: one of its environments went non-finite."""
        self._active[2 * a : 2 * a + 2] = False
        self._tasks[a] = None
        self._startable = True
        self.broken_pairs += 1
        self._broken_in_a_row += 1
        if self._broken_in_a_row >= BROKEN_STEPS:
            raise EnvFailed(f"environment {self.env.name!r}: {BROKEN_STEPS} pairs in a row here were "
                            "dropped for a non-finite observation or reward, and none finished: nothing "
                            "but rejected data")  # fmt: skip
        self._broken_log.note(f"agent {self.ids[a]}", "non_finite", "an environment returned a "
                              "non-finite observation or reward; the pair is dropped")  # fmt: skip

    def take_batch(self) -> dict[str, np.ndarray] | None:
        """The finished pairs and observation moments since the last batch (None if no pair)."""
        if not self._rows:
            return None
        n = self._obs_n
        mean = self._obs_sum / n if n else np.zeros_like(self._obs_sum)
        m2 = np.maximum(self._obs_sq - n * mean**2, 0.0) if n else np.zeros_like(mean)
        moments = {"obs_count": np.array([float(n)]), "obs_mean": mean, "obs_m2": m2}
        batch = pack_batch(self._rows, moments)
        self._rows = []
        self._obs_n, self._obs_sum, self._obs_sq = 0, np.zeros_like(mean), np.zeros_like(mean)
        return batch

    def work(self, stream: ExperienceStream) -> bool:
        """Step the pairs of the version at hand for up to `flush_interval` seconds and send what
        finished; False when its whole hand-out is done and sent (it waits for a new version)."""
        self.start_idle()
        if self.busy:
            started = time.monotonic()
            while self.busy and time.monotonic() - started < self.cfg.flush_interval:
                self.step()
                if self.busy:  # idle agents join the version at hand; when all are idle, send
                    self.start_idle()  # first, so that they start the version their results make
        if (batch := self.take_batch()) is None:
            return False
        stream.send(self.version, batch)
        if not self.busy:
            # The hand-out is done. Wait until the master has dealt with these results (it hands
            # the credit back after publishing any update they completed): fetching sooner gets
            # the version made just before they landed, and then every result of this worker
            # would lag its own last update (two versions, with two bursty workers).
            stream.wait_acknowledged(ACK_WAIT_SECONDS)
        return True

    def close(self) -> None:
        for env in self.envs:
            env.close()


def run_actor(cfg: ESConfig, ctx: RunContext) -> int:
    """Evaluate handed-out pairs until the master's parameters say the run is done
    (runtime/actor.py)."""
    cfg.validate()
    ids, seed = agent_ids(ctx.index, ctx.agents_in_worker), actor_seed(ctx.seed, ctx.index)
    worker = ESWorker(cfg, ctx.env, ids, seed)
    return actor.run_actor(worker, ctx, name="es-worker")

"""The ES master's core: results in, centered-rank Adam updates, parameters out.

`ESMaster` has no networking, so tests drive it directly: add_results() until ready(), update(),
params(). `learner.run_learner` serves it over the protocol.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import torch

from surreal.protocol.ratelimit import RejectionLog
from surreal.protocol.types import Params
from surreal.runtime import progress
from surreal.runtime.checkpoint import load_checkpoint
from surreal.runtime.envs.make import EnvSpaces
from surreal.runtime.es.config import ESConfig
from surreal.runtime.es.handout import Handout
from surreal.runtime.es.maths import adam_step, ascent_direction
from surreal.runtime.es.networks import PolicySpec, init_params
from surreal.runtime.es.noise import perturbations
from surreal.runtime.es.results import RESULT_KEYS, check_batch
from surreal.runtime.normalization import RunningMeanStd
from surreal.runtime.progress import LearnerProgress
from surreal.runtime.run import progress_extras
from surreal.runtime.tb import Scalars

log = logging.getLogger(__name__)

MIN_ROUND_WAIT_SECONDS = 2.0  # the shortest a round's first pairs wait for the rest of it


@dataclasses.dataclass
class Counters(progress.Counters):
    """env_steps: of evaluated results, accepted and rejected as too old; episodes: two per pair."""

    env_steps_rejected: int = 0  # of which rejected: stale, or of a version lost in a restart
    results_accepted: int = 0  # pairs accepted
    short_rounds: int = 0  # rounds updated after their wait without all their pairs (a lost worker)


class ESMaster(LearnerProgress):
    """`num_agents` is the run's agent count at create (the spec's): it fixes Adam's step size.
    `agents` is the count served now, if a scale changed it (default: `num_agents`); the hand-out
    and update sizes follow it, here and on every `set_agents`."""

    holding = False  # one master: it never waits for a group
    recent_returns = 50  # training episodes (two per pair) that status's train_return averages

    def __init__(
        self,
        cfg: ESConfig,
        spaces: EnvSpaces,
        total_steps: int,
        num_agents: int,
        *,
        seed: int = 0,
        exp_dir: Path | None = None,
        agents: int | None = None,
    ) -> None:
        cfg.validate()
        self.cfg, self.total_steps = cfg, total_steps
        self.spec = PolicySpec.from_config(cfg, spaces)
        self.theta = init_params(self.spec, seed).astype(np.float64)
        self._adam_m = np.zeros_like(self.theta)
        self._adam_v = np.zeros_like(self.theta)
        self.obs_rms = RunningMeanStd((spaces.obs_dim,))
        self.counters = Counters()
        # Adam's step is an optimizer setting: the create-time count's for the whole run (a scale
        # does not change it; see set_agents).
        self.step_size = cfg.step_size(num_agents)
        self.num_agents = num_agents if agents is None else agents
        self.pairs_per_update = cfg.pairs_per_update(self.num_agents)
        self.round_pairs = cfg.round_pairs(self.num_agents)
        self.handout = Handout(seed, cfg.pairs_per_agent(self.num_agents), cfg.staleness(self.num_agents))
        self.agents: set[int] = set()  # logical agents with an accepted result
        self.train_returns: deque[float] = deque(maxlen=200)
        self.staleness: deque[float] = deque(maxlen=10)  # versions behind, per recent update
        self._updating = 0.0  # seconds in update() since this process started
        self._init_progress()
        self._pool: list[tuple[int, int, float, float]] = []  # (seed, version, fitness+, fitness-)
        # Rounds (round_pairs > 0): the pool drains in updates once a round's pairs are in, or
        # once the round's first result has waited as long as the round took to produce it.
        # Leftovers of a round (stragglers) wait for the next one; they do not start its clock.
        self._draining = False
        self._version_at = time.monotonic()  # when the current version was made
        self._pooled_at: float | None = None  # when the round's first pair arrived
        self._rejections = RejectionLog(log, "result")  # bounded-rate log of rejected results
        self._ckpt_dir = exp_dir / "checkpoints" if exp_dir else None
        self._tb = Scalars(exp_dir / "tb") if exp_dir else None
        if self._ckpt_dir is not None and not self._restore():
            self.save()  # from the start: a master that dies before its first periodic one comes back past it
        self.handout.open(self.counters.version)

    # --- progress ---

    @property
    def done(self) -> bool:
        return self.counters.env_steps >= self.total_steps

    def ready(self) -> bool:
        """Enough pairs for an update (none once the run is done). With rounds, a round's first
        pairs wait for the rest of the round (every agent's result on the version they share),
        at most as long again as the round took to produce its first results: a lost or slow
        worker delays the round, it does not stop the run."""
        if self.done or len(self._pool) < self.pairs_per_update:
            return False
        if self._draining or not self.round_pairs or len(self._pool) >= self.round_pairs:
            self._draining = True
            return True
        if self._pooled_at is None:  # only leftovers of the last round: wait for this one
            return False
        waited = time.monotonic() - self._pooled_at
        if waited >= max(MIN_ROUND_WAIT_SECONDS, self._pooled_at - self._version_at):
            self._draining = True
            self.counters.short_rounds += 1
        return self._draining

    def params(self) -> Params:
        """The current parameters, the version's hand-out and normalization, the run's progress."""
        c = self.counters
        extras = {
            "obs_mean": self.obs_rms.mean.copy(),
            "obs_var": self.obs_rms.var.copy(),
            "nonce": np.array([self.handout.nonce(c.version)], np.int64),
            "pairs_per_agent": np.array([self.handout.pairs_of(c.version)], np.int64),
            **progress_extras(c.env_steps, self.done),
        }
        return Params(c.version, {"theta": self.theta.astype(np.float32)}, extras)

    def new_version(self) -> None:
        """Bump the version without an update (e.g. to announce `done` with unchanged weights)."""
        self.counters.version += 1
        self._version_at = time.monotonic()
        self.handout.open(self.counters.version)

    def set_agents(self, num_agents: int) -> None:
        """`surreal scale`: size the hand-outs and updates for `num_agents` agents: pairs per agent
        and the staleness window for versions opened from now on (a version keeps its hand-out, so
        results in flight still count), pairs per update and round at once (pooled results stay).
        Not the config (presets.MANY_AGENTS was decided at create) nor Adam's `step_size`: changing
        the optimizer mid-run would change the run, not just its throughput.

        With fewer agents the current hand-out cannot fill an update without those that are gone:
        a new version (the same weights, the new hand-out) is opened at once, and every version
        accepted until then stays acceptable. More agents need no new version."""
        if num_agents < 1:
            raise ValueError(f"num_agents must be >= 1, got {num_agents}")
        cfg = self.cfg
        self.num_agents = num_agents
        self.pairs_per_update = cfg.pairs_per_update(num_agents)
        self.round_pairs = cfg.round_pairs(num_agents)
        self.handout.pairs_per_agent = cfg.pairs_per_agent(num_agents)
        self.handout.max_staleness = cfg.staleness(num_agents)
        log.info("hand-out for %d agents: %d pairs per agent, %d per update, rounds of %d, staleness %d",
                 num_agents, self.handout.pairs_per_agent, self.pairs_per_update, self.round_pairs,
                 self.handout.max_staleness)  # fmt: skip
        if not self.done and self.handout.pairs_per_agent > self.handout.pairs_of(self.counters.version):
            # The round's clock (_version_at, _pooled_at) is left as it is: this is its version.
            self.counters.version += 1
            self.handout.open(self.counters.version, keep_window=True)
            # Checkpoints assume at most checkpoint_every versions between them (_restore jumps
            # that far): a version without an update is saved, so that a restart cannot reuse it.
            self.save()

    # --- results ---

    def add_results(self, tensors: dict[str, np.ndarray], worker_id: str = "worker") -> int:
        """Check every result of one batch; pool the accepted ones. Returns how many."""
        c, t = self.counters, tensors
        problem = check_batch(t, self.cfg.norm_obs)
        if problem is not None:
            why, detail = problem
            self.handout.rejected[why] += max(1, len(t["agent_id"]))
            self._rejections.note(worker_id, why, detail)
            return 0
        if self.cfg.norm_obs:  # real states, whatever their results' fate
            self.obs_rms.merge(RunningMeanStd.moments_from_arrays(t, "obs"))
        if self.done:
            return 0
        accepted = 0
        rows = zip(*(t[k].tolist() for k in RESULT_KEYS), strict=True)
        for agent, pair, seed, version, rets, lengths in rows:
            reason = self.handout.check(version, agent, pair, seed, (rets[0], rets[1]))
            if reason is None:
                if self._pooled_at is None:  # the round's first result since its version
                    self._pooled_at = time.monotonic()
                shift = self.cfg.reward_shift
                self._pool.append((seed, version, rets[0] - shift * lengths[0], rets[1] - shift * lengths[1]))
                self.agents.add(agent)
                self.train_returns.extend(rets)
                c.env_steps += lengths[0] + lengths[1]
                c.episodes += 2
                c.results_accepted += 1
                accepted += 1
            elif reason == "nan":
                self._rejections.note(worker_id, reason, "a non-finite return")
            elif reason == "stale" or (reason == "unknown_version" and version < c.version):
                # Real evaluations that came too late (or outlived a master restart): the step
                # budget counts what the environments did, as PPO's does for dropped fragments.
                c.env_steps += lengths[0] + lengths[1]
                c.env_steps_rejected += lengths[0] + lengths[1]
        self._note_steps()
        return accepted

    # --- update ---

    def busy_seconds(self) -> float:
        return self._updating

    def update(self) -> dict[str, float]:
        started = time.monotonic()
        try:
            return self._update()
        finally:
            self._updating += time.monotonic() - started

    def _update(self) -> dict[str, float]:
        """One ES step on the oldest `pairs_per_update` pooled pairs: centered ranks, antithetic
        estimate, weight decay, Adam. A worker's batch can hold the results of hundreds of agents
        that finished together; the rest stay pooled for the next updates (results may lag by the
        staleness the config allows), so a burst is several updates, not one of everything."""
        cfg, c = self.cfg, self.counters
        pool, self._pool = self._pool[: self.pairs_per_update], self._pool[self.pairs_per_update :]
        if len(self._pool) < self.pairs_per_update:  # the round is used up; what is left waits
            self._draining, self._pooled_at = False, None  # for the next round's pairs
        seeds = np.array([p[0] for p in pool], np.int64)
        fitness = np.array([(p[2], p[3]) for p in pool], np.float64)
        noise = perturbations(seeds, self.spec.num_params)
        g = ascent_direction(fitness, noise, cfg.sigma, cfg.top_fraction)
        stepped = adam_step(
            self.theta, -g + cfg.weight_decay * self.theta, self._adam_m, self._adam_v,
            c.updates + 1, self.current_step_size(), cfg.adam_beta1, cfg.adam_beta2,
        )  # fmt: skip
        if not all(np.isfinite(a).all() for a in stepped):  # ranks keep it finite; make sure
            c.skipped_updates += 1
            self._rejections.note("master", "non_finite_update", "the update was not finite; skipped")
            return {}
        self.theta, self._adam_m, self._adam_v = stepped
        c.updates += 1
        self.new_version()
        stats = {
            "pairs": float(len(pool)),
            "fitness_mean": float(fitness.mean()),
            "fitness_max": float(fitness.max()),
            "staleness": float(np.mean([c.version - 1 - p[1] for p in pool])),
            "grad_norm": float(np.linalg.norm(g)),
            "theta_norm": float(np.linalg.norm(self.theta)),
        }
        self.staleness.append(stats["staleness"])
        self._log_update(stats)
        if self.checkpoint_due():
            self.save()
        return stats

    def current_step_size(self) -> float:
        """Adam's step for the next update: `step_size`, decayed linearly to 0 at the run's last
        env step when `anneal_lr` is set."""
        if not self.cfg.anneal_lr:
            return self.step_size
        return self.step_size * min(max(1.0 - self.counters.env_steps / self.total_steps, 0.0), 1.0)

    # --- evaluation, status, checkpoints ---

    def status(self, connected_actors: int = 0) -> dict[str, Any]:
        """The status contract's fields (as PPO's), plus what ES adds."""
        c = self.counters
        rejected = dict(self.handout.rejected)
        # ES's dropped experience: results rejected, for any reason.
        return {
            **self.contract_status(sum(rejected.values()), connected_actors),
            "agents_reporting": len(self.agents),
            "results_accepted": c.results_accepted,
            "results_rejected": rejected,
            "staleness": float(np.mean(self.staleness)) if self.staleness else None,
            "env_steps_rejected": c.env_steps_rejected,
            "skipped_updates": c.skipped_updates,
            "short_rounds": c.short_rounds,
            "pairs_per_update": self.pairs_per_update,
            "round_pairs": self.round_pairs,
            "step_size": self.step_size,
            "pairs_per_agent": self.handout.pairs_per_agent,  # of the versions opened from now on
            "max_staleness": self.handout.max_staleness,
        }

    def _log_update(self, stats: dict[str, float]) -> None:
        if self._tb is None:
            return
        c = self.counters
        self._tb.add("train", stats, c.env_steps)
        progress = {"steps_per_second": self.steps_per_second(), "episodes": c.episodes,
                    "agents_reporting": len(self.agents), "short_rounds": c.short_rounds,
                    "results_rejected": sum(self.handout.rejected.values())}  # fmt: skip
        if self.train_returns:
            progress["episode_return"] = self.train_return()
        self._tb.add("progress", progress, c.env_steps)
        self._tb.add("results_rejected", dict(self.handout.rejected), c.env_steps)

    def save(self, *, clean: bool = False) -> None:
        """Checkpoint parameters, Adam state, normalization, counters and ledger totals. `clean`:
        no later version is published by this process (LearnerProgress._save_checkpoint)."""
        if self._ckpt_dir is None:
            return
        arrays = {"theta": self.theta, "adam_m": self._adam_m, "adam_v": self._adam_v,
                  "agents": np.array(sorted(self.agents), np.int64),
                  **self.obs_rms.to_arrays("obs")}  # fmt: skip
        state = {
            "arrays": {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()},
            "rejected": dict(self.handout.rejected),
        }
        self._save_checkpoint(self._ckpt_dir, state, clean=clean)

    def _restore(self) -> bool:
        """Resume from the last checkpoint; False when there is none (a fresh start)."""
        assert self._ckpt_dir is not None
        saved = load_checkpoint(self._ckpt_dir)
        if saved is None:
            return False
        envelope, state = self._restore_checkpoint(saved)  # counters, returns, evaluation, version
        arrays = {k: v.numpy() for k, v in state["arrays"].items()}
        self.theta, self._adam_m, self._adam_v = arrays["theta"], arrays["adam_m"], arrays["adam_v"]
        self.agents = set(arrays["agents"].tolist())
        self.obs_rms.moments = RunningMeanStd.moments_from_arrays(arrays, "obs")
        self.handout.rejected.update(state["rejected"])
        if envelope.clean:
            # The last version its process published, but not its pool of results: workers that
            # already evaluated their pairs of it would wait for a version that cannot come (the
            # pool can no longer fill). The same weights under the next version number are a
            # new hand-out; no update is lost.
            self.counters.version += 1
            log.info("version %d: the checkpoint's weights, handed out anew", self.counters.version)
        return True

    def close(self) -> None:
        self._rejections.flush(force=True)
        if self._tb is not None:
            self._tb.close()

"""What a learner core (PPO's learner, ES's master) tracks for status besides its algorithm, and
the checkpoint's envelope it writes and restores."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from surreal.protocol.types import EvalReport
from surreal.runtime.checkpoint import Envelope
from surreal.runtime.tb import Scalars


@dataclasses.dataclass
class Counters:
    """Progress that survives restarts (saved in every checkpoint): every learner core's; a family
    adds its own counts in a subclass."""

    version: int = 0  # policy version; +1 per update
    env_steps: int = 0  # env steps counted (received from actors, inserted into replay, evaluated)
    updates: int = 0  # updates applied
    episodes: int = 0  # training episodes finished
    skipped_updates: int = 0  # updates undone for a non-finite statistic or weight (weights kept)
    elapsed_seconds: float = 0.0  # wall time of earlier runs of this learner (before a restart)


class LearnerProgress:
    """Evaluation results, the recent env-step rate and the run's elapsed time.

    A mixin: the core calls `_init_progress()` in its constructor and `_note_steps()` whenever its
    env step count grows, and provides `counters` (a `Counters`), `train_returns`, `recent_returns`,
    `done` and `_tb`.
    """

    counters: Any
    cfg: Any  # the algorithm's config: checkpoint_every (updates), checkpoint_seconds
    train_returns: deque[float]
    recent_returns: int  # training episodes that status's train_return averages
    _tb: Scalars | None

    @property
    def done(self) -> bool:
        raise NotImplementedError

    def _init_progress(self) -> None:
        self.eval_return: float | None = None
        self.best_eval_return: float | None = None
        self.eval_stderr: float | None = None  # the standard error of eval_return's mean
        self.eval_episodes: int | None = None  # the episodes it is the mean of
        self.final_evaluated = False
        self._started = time.monotonic()
        # (time, env_steps, busy_seconds, actor_seconds) samples, RATE_SAMPLE_SECONDS apart but the last
        self._rate: deque[tuple[float, int, float | None, tuple[float, float]]] = deque(maxlen=64)
        # (seconds spanned, seconds waited) of the actors feeding this process, as their fragments
        # said them (Fragment.span_ms, waited_ms) to its server: the serving loop sets the server's.
        self.actor_clock: Callable[[], tuple[float, float]] = lambda: (0.0, 0.0)
        # The last checkpoint: its version (before a restore's jump), when it was written (wall
        # clock, so that it survives a restart) and the update count then.
        self.checkpoint_version: int | None = None
        self._checkpoint_time: float | None = None
        self._checkpoint_monotonic = time.monotonic()
        self._checkpoint_updates = 0

    def _note_steps(self) -> None:
        sample = (time.monotonic(), self.counters.env_steps, self.busy_seconds(), self.actor_seconds())
        if len(self._rate) >= 2 and sample[0] - self._rate[-2][0] < RATE_SAMPLE_SECONDS:
            self._rate[-1] = sample  # the window's newest point stays current
        else:
            self._rate.append(sample)

    def busy_seconds(self) -> float | None:
        """Seconds this process has spent in updates (None: the core does not say)."""
        return None

    def actor_seconds(self) -> tuple[float, float]:
        """(seconds spanned, seconds waited) that the actors feeding this learner said since it
        started, with the fragments its server received (an off-policy learner's: its shards')."""
        return self.actor_clock()

    def update_share(self) -> float | None:
        """The share of the recent window this learner spent updating (None until it is known)."""
        if len(self._rate) < 2 or self._rate[0][2] is None or self._rate[-1][2] is None:
            return None
        (t0, _, b0, _), (t1, _, b1, _) = self._rate[0], self._rate[-1]
        return fraction(b1 - b0, t1 - t0)  # type: ignore[operator]

    def wait_share(self) -> float | None:
        """The share of their time in the recent window that the actors feeding this learner spent
        waiting on it (for credits, or idle), as they said it; None until one said it."""
        if len(self._rate) < 2:
            return None
        (_, _, _, (span0, waited0)), (_, _, _, (span1, waited1)) = self._rate[0], self._rate[-1]
        return fraction(waited1 - waited0, span1 - span0)

    def training_problem(self) -> str | None:
        """Why a run that reached its steps did not train, or None: a run is Succeeded only when at
        least one update was applied (serving.finish fails it otherwise)."""
        c = self.counters
        if c.updates > 0:
            return None
        skipped = getattr(c, "skipped_updates", 0)
        if skipped:
            return (f"no update was applied in {c.env_steps:,} env steps: all {skipped:,} were skipped (a "
                    "non-finite loss, gradient, statistic or weight; the weights were kept)")  # fmt: skip
        return (f"no update was applied in {c.env_steps:,} env steps: learning never started (it "
                "needs more env steps before its first update than the run has)")  # fmt: skip

    def record_eval(self, report: EvalReport) -> None:
        self.eval_return, self.eval_episodes = report.mean_return, report.episodes
        self.eval_stderr = report.std_return / max(1, report.episodes - 1) ** 0.5
        best = self.best_eval_return
        self.best_eval_return = report.mean_return if best is None else max(best, report.mean_return)
        if self.done and report.policy_version == self.counters.version:
            self.final_evaluated = True
        if self._tb is not None:
            values = {"mean_return": report.mean_return, "mean_length": report.mean_length,
                      "stderr": self.eval_stderr, "episodes": report.episodes}  # fmt: skip
            self._tb.add("eval", values, report.env_steps)

    def checkpoint_due(self) -> bool:
        """Every `checkpoint_every` updates, and at least every `checkpoint_seconds`: a learner
        killed without notice (SIGKILL, a lost node) loses at most that much. The count bound also
        bounds the versions published after the last checkpoint (a restore jumps past them)."""
        c, cfg = self.counters, self.cfg
        return (
            c.updates - self._checkpoint_updates >= cfg.checkpoint_every
            or time.monotonic() - self._checkpoint_monotonic >= cfg.checkpoint_seconds
        )

    def _note_checkpoint(self, version: int, wall_time: float) -> None:
        self.checkpoint_version = version
        self._checkpoint_time = wall_time
        self._checkpoint_monotonic = time.monotonic()
        self._checkpoint_updates = self.counters.updates

    def _save_checkpoint(self, directory: Path, state: dict[str, Any], *, clean: bool) -> None:
        """Write the algorithm's `state` in the envelope (checkpoint.Envelope) as `directory`'s
        checkpoint. `clean`: this process publishes no version after this one (it is stopping), so
        a restore resumes at exactly this version instead of jumping past versions that may have
        existed."""
        counters = dataclasses.replace(self.counters, elapsed_seconds=self.elapsed_seconds())
        envelope = Envelope(dataclasses.asdict(counters), list(self.train_returns), self.eval_return,
                            self.best_eval_return, clean, eval_stderr=self.eval_stderr,
                            eval_episodes=self.eval_episodes)  # fmt: skip
        try:
            envelope.save(state, directory)
        except OSError as exc:  # a full or failing disk: training goes on, and tries again later
            self._checkpoint_monotonic, self._checkpoint_updates = time.monotonic(), self.counters.updates
            logging.getLogger(type(self).__module__).error(
                "checkpoint of version %d not written (%s): the last one written stays (version %s)",
                counters.version, exc, self.checkpoint_version,
            )  # fmt: skip
            return
        self._note_checkpoint(counters.version, envelope.saved_at)
        logging.getLogger(type(self).__module__).info(
            "checkpoint: version %d, %d env steps, %d updates, train return %s, eval return %s%s",
            counters.version, counters.env_steps, counters.updates, self.train_return(),
            self.eval_return, " (clean)" if clean else "",
        )  # fmt: skip

    def _restore_checkpoint(self, saved: dict[str, Any]) -> tuple[Envelope, dict[str, Any]]:
        """Take a loaded checkpoint's envelope: the counters, returns and evaluation results. Its
        version goes on past every one that its process may have published after it (an unclean
        checkpoint's successors died with the process, and actors may still hold them:
        checkpoint.resumed_version). Returns the envelope and the algorithm's own state."""
        envelope, state = Envelope.open(saved)
        self.counters = envelope.resumed_counters(
            type(self.counters), checkpoint_every=self.cfg.checkpoint_every
        )
        self.train_returns.extend(envelope.train_returns)
        self.eval_return, self.best_eval_return = envelope.eval_return, envelope.best_eval_return
        self.eval_stderr, self.eval_episodes = envelope.eval_stderr, envelope.eval_episodes
        self._note_checkpoint(int(envelope.counters["version"]), envelope.saved_at)
        logging.getLogger(type(self).__module__).info(
            "resumed from checkpoint (%s): %s", "clean" if envelope.clean else "jumped", self.counters
        )
        return envelope, state

    def checkpoint_age_seconds(self) -> float | None:
        return None if self._checkpoint_time is None else max(0.0, time.time() - self._checkpoint_time)

    def steps_per_second(self) -> float:
        if len(self._rate) < 2:
            return 0.0
        (t0, s0, _, _), (t1, s1, _, _) = self._rate[0], self._rate[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 else 0.0

    def elapsed_seconds(self) -> float:
        return self.counters.elapsed_seconds + time.monotonic() - self._started

    def train_return(self) -> float | None:
        """The mean return of the last `recent_returns` training episodes (None before the first)."""
        recent = list(self.train_returns)[-self.recent_returns :]
        return float(np.mean(recent)) if recent else None

    def contract_status(self, dropped: int, connected_actors: int) -> dict[str, Any]:
        """The fields of the status contract (status.json, the Status RPC), as every algorithm
        fills them: `dropped` counts the experience the core discarded."""
        c = self.counters
        return {
            "env_steps": c.env_steps,
            "updates": c.updates,
            "policy_version": c.version,
            "episodes": c.episodes,
            "train_return": self.train_return(),
            "eval_return": self.eval_return,
            "best_eval_return": self.best_eval_return,
            "eval_stderr": self.eval_stderr,
            "eval_episodes": self.eval_episodes,
            "steps_per_second": self.steps_per_second(),
            "update_share": (share := self.update_share()),
            "actor_wait_share": (wait := self.wait_share()),
            "balance": balance(share, wait, self.done),
            "elapsed_seconds": self.elapsed_seconds(),
            "dropped_fragments": dropped,
            "connected_actors": connected_actors,
            "checkpoint_version": self.checkpoint_version,
            "checkpoint_age_seconds": self.checkpoint_age_seconds(),
            "done": self.done and self.final_evaluated,
        }


RATE_SAMPLE_SECONDS = 0.5
# With the learner's update share alone (actors that do not say their time): the share beyond which
# it is the run's cap, and below which it mostly waits.
LEARNER_BOUND, ACTOR_BOUND = 0.9, 0.3
MOSTLY = 0.5  # with both sides' shares: a side that waits this much of its time or more waits on the other


def fraction(part: float, whole: float) -> float | None:
    """`part` of `whole` in [0, 1] (counts that went back clipped); None when `whole` did not grow."""
    return min(1.0, max(0.0, part / whole)) if whole > 0 else None


def balance(update: float | None, wait: float | None = None, done: bool = False) -> str | None:
    """What the learner's recent update share and its actors' wait share say of the run's packing,
    in a line (None while neither is known, or once the run is done). With both: the side that
    waits most of its time waits on the other (the learner idle: it waits on the actors; the actors
    waiting: the learner is the cap); both, and neither holds the run: the transport or the replay's
    limiter does. With the learner's alone, only its extremes say it (LEARNER_BOUND, ACTOR_BOUND)."""
    if done or (update is None and wait is None):
        return None
    said = " and ".join(part for part in (
        None if update is None else f"the learner updates {update:.0%} of the time",
        None if wait is None else f"the actors wait on it {wait:.0%} of theirs") if part)  # fmt: skip
    if wait is None:  # then `update` is known
        learner_waits, actors_wait = update <= ACTOR_BOUND, update >= LEARNER_BOUND  # type: ignore[operator]
    else:
        learner_waits, actors_wait = update is not None and 1 - update >= MOSTLY, wait >= MOSTLY
    if learner_waits and actors_wait:
        return (f"{said}: both wait, so neither the packing nor the learner holds the run: the transport "
                "does, or the replay's limiter (replay_ratio, credits_per_worker)")  # fmt: skip
    if actors_wait:
        return (f"{said}: the learner is the cap; fewer actor CPUs (--agents-per-pod) would train as "
                "fast, learner ranks (--learners) or a GPU faster")  # fmt: skip
    if learner_waits:
        return (f"{said}: the learner waits on the actors; more actor CPUs (--agents, --agents-per-pod) "
                "would feed it")  # fmt: skip
    return f"{said}: actors and learner are in balance"


def anneal(optimizers: Iterable[Any], left: float) -> float:
    """Set each parameter group's lr to `left` (clipped to [0, 1]: the share of the run still to
    go, for `anneal_lr`; 1 to hold it) of the lr it started with, which the group keeps as
    "initial_lr" (torch's schedulers' key) from the first call on. Returns the first group's lr."""
    scale, first = min(max(left, 0.0), 1.0), None
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])
            group["lr"] = group["initial_lr"] * scale
            first = group["lr"] if first is None else first
    return 0.0 if first is None else float(first)

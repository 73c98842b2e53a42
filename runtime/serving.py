"""What every learner role does around its training loop: status, evaluations, the end of a run.

A learner core (PPOLearner, ESMaster) trains; `ServingLoop` carries what both serve around it
(evaluation reports in, status.json and the Status RPC out about once a second, the agent count
that `surreal scale` writes into scale.json in), and `finish` is the common end: wait for the
evaluator's report on the final version (or evaluate it here), serve until the workers have hung
up; then the process exits 0 (on Kubernetes its Job completes and frees what it held).
"""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from surreal.protocol.codec import TensorSpec
from surreal.protocol.server import LearnerServer
from surreal.protocol.types import EvalReport, Fragment, Params
from surreal.runtime import deadline as deadline_mod
from surreal.runtime import preemption
from surreal.runtime.checkpoint import write_json
from surreal.runtime.envs.make import EnvBatch
from surreal.runtime.evaluator import HEARTBEAT_SECONDS, Policy, eval_seed, evaluate
from surreal.runtime.exits import EXIT_NOT_TRAINED, EXIT_PREEMPTED
from surreal.runtime.ranks import RankGroup
from surreal.runtime.run import PeerLost, RoleFailed, RunContext, extras_done, extras_env_steps
from surreal.runtime.scale import SCALE_FILE, read_scale

log = logging.getLogger(__name__)


SPARE_STREAMS = 8  # streams of restarted workers that the server has not yet seen close
SCALE_CHECK_SECONDS = 1.0  # how often the learner looks at SCALE_FILE (a stat)
# At the end, a worker the run heard from in its last RECENT_WORKER_SECONDS (in any of the
# learner's lives, since its last scale) with no stream open (reconnecting, or its replacement
# still starting) is waited for, so that it sees `done` before the learner exits: a worker that
# misses it keeps retrying a learner that is gone (GIVE_UP_SECONDS) and its pod holds its node
# meanwhile. Who was heard from when lives in WORKERS_FILE, beside the checkpoints, so that a
# restarted learner knows the workers its predecessors had (written by tick(): within a second of a
# new worker's first fragment, and its times every WORKERS_WRITE_SECONDS).
WORKERS_FILE = "workers.json"
RECENT_WORKER_SECONDS = 300.0
# A scale down retires workers that may still send a fragment or two while they stop: what is heard
# only until this long after it is theirs, and owes them nothing at the end (they never come back).
RETIRE_SECONDS = 30.0
WORKERS_WRITE_SECONDS = 30.0
RELEASE_SECONDS = 60.0  # the longest the learner serves, after the end, for workers to see it
# A worker sees `done` with the next parameters it fetches and hangs up at once; one whose stream is
# still open this long after the end (or after it opened it, if later) is not listening (a buggy
# or hostile peer) and is not waited for.
HANG_UP_SECONDS = 10.0
# Workers that poll for parameters rather than stream to the learner (off-policy actors, replay
# shards) learn of the end from the version saying so: one that asked within this long (it asks
# with every fragment, a shard every second) and still holds an older version is waited for.
ASKING_SECONDS = 10.0
HOLD_POLL_SECONDS = 0.001  # how often a learner rank waiting for its group looks again (a store read)
# How long a learner rank waits for a fragment before it looks whether its group holds a batch
# (one counter read in the group's store): an update's start is late by this at most. A single
# learner knows its batch without looking, and waits longer.
RANK_POLL_SECONDS = 0.005
FRAGMENT_WAIT_SECONDS = 0.25
# At the end the learner waits for the evaluator's report on the final version only while the
# evaluator is alive: it called the learner in the last EVALUATOR_SILENCE_SECONDS (a live one calls
# at least every evaluator.HEARTBEAT_SECONDS, even while it evaluates; the margin is for a busy
# machine), or it never has and the learner started less than EVALUATOR_START_SECONDS ago (it may
# still be starting). Otherwise (it failed for good, or is being restarted) the learner evaluates
# the final version itself at once, rather than wait out `final_eval_timeout`.
EVALUATOR_SILENCE_SECONDS = 6 * HEARTBEAT_SECONDS
EVALUATOR_START_SECONDS = 120.0


def max_streams(num_agents: int) -> int:
    """Experience streams a learner accepts: one per worker, and every worker hosts at least one
    agent on any backend; plus streams of restarted workers not yet seen closing."""
    return num_agents + SPARE_STREAMS


def initial_agents(ctx: RunContext) -> int:
    """The agent count a learner starts with: the last `surreal scale`, else the spec's."""
    return read_scale(ctx.exp_dir) or ctx.num_agents


# What the learner's server refused before any fragment reached the core (status "wire_rejections").
WIRE_REJECTIONS = (
    ("unauthenticated", "rejected_auth"),  # calls without the experiment's token
    ("undecodable", "rejected_undecodable"),  # bytes that are not a valid message
    ("invalid_stream", "rejected_invalid"),  # streams aborted: bad tensors or protocol misuse
    ("too_many_streams", "rejected_streams"),  # streams beyond the server's capacity
    ("bad_eval", "rejected_evals"),  # eval reports with non-finite or impossible numbers
)


class LearnerCore(Protocol):
    final_evaluated: bool
    cfg: Any  # the algorithm's config (progress_deadline_seconds)
    actor_clock: Callable[[], tuple[float, float]]  # what its actors said of their time (progress.py)
    counters: Any  # env_steps, updates (applied), ...

    def training_problem(self) -> str | None: ...  # why a run at its steps did not train, or None

    @property
    def holding(self) -> bool: ...  # a learner rank waits for its group's update, taking nothing

    @property
    def done(self) -> bool: ...  # the run's step budget is used up
    def ready(self) -> bool: ...  # an update is due
    def update(self) -> Any: ...  # one update; bumps the version
    def new_version(self) -> None: ...  # bump the version without an update
    def save(self, *, clean: bool = False) -> None: ...  # checkpoint
    def params(self) -> Params: ...
    def record_eval(self, report: EvalReport) -> None: ...
    def status(self, connected_actors: int = 0) -> dict[str, Any]: ...
    def set_agents(self, num_agents: int) -> None: ...  # `surreal scale` changed the agent count
    def close(self) -> None: ...


class ServingLoop:
    """A learner's server, its main loop, and the status and evaluation bookkeeping. `take` hands a
    received fragment to the core (each algorithm's own method; it also gets fragments that arrive
    after training ended, which a core may ignore). With `credit_on_take=False` a fragment's credit
    goes back to its stream only once the core has dealt with it: after `take`, and after the
    updates it completed are published. The server is started here and stopped when `run()`
    returns.

    `agents` is the count the core was made for (`initial_agents`); the server takes
    `max_streams(agents)` streams. Whenever SCALE_FILE names another count, the server's capacity
    and the core follow it (`set_agents`), and status reports it as "agents"."""

    def __init__(
        self,
        core: LearnerCore,
        ctx: RunContext,
        *,
        take: Callable[[Fragment], object],
        experience_schema: Mapping[str, TensorSpec],
        credits_per_stream: int,
        agents: int,
        credit_on_take: bool = True,
        group: RankGroup | None = None,
        fragment_wait: float | None = None,
    ) -> None:
        self.core = core
        self.take = take
        self.agents = agents
        # Of learner ranks, rank 0 writes status.json; each rank knows its own workers.
        self.group = group or RankGroup()
        self.evals: queue.SimpleQueue[EvalReport] = queue.SimpleQueue()
        self.status_path = ctx.exp_dir / "status.json" if self.group.is_root else None
        self._status_unwritten = False  # a write of status.json failed (said once)
        self._published_version: int | None = None  # the version number last published
        # How long a look for a fragment waits: 0 for a core whose `ready` waits itself (off-policy's,
        # on its replay's samples).
        self._fragment_wait = fragment_wait if fragment_wait is not None else (
            RANK_POLL_SECONDS if self.group.size > 1 else FRAGMENT_WAIT_SECONDS)  # fmt: skip
        self.scale_path = ctx.exp_dir / SCALE_FILE
        rank = self.group.rank
        self.workers_path = ctx.exp_dir / (WORKERS_FILE if rank == 0 else f"workers-{rank}.json")
        # worker id -> when it last sent experience (wall clock), since the last scale
        self._known = read_workers(self.workers_path)
        self._known_written_at = time.monotonic()
        self._scale_seen: tuple[int, int, int] | None = None  # (mtime, size, inode) last read
        self._scale_at = 0.0
        # What the run waits for at its end, since when and how long at most (status says it).
        self.waiting_for: tuple[str, float, float] | None = None
        # grpc threads read the snapshot; the main loop replaces it about once a second
        self.snapshot: dict[str, dict[str, Any]] = {"status": self._status(0)}
        self.server = LearnerServer(
            token=ctx.token,
            experience_schema=experience_schema,
            host="0.0.0.0" if ctx.bind_all else ctx.learner_host,
            port=ctx.learner_port,
            credits_per_stream=credits_per_stream,
            max_streams=max_streams(agents),
            status_provider=lambda: self.snapshot["status"],
            on_eval=self.evals.put,
            credit_on_take=credit_on_take,
        )
        core.actor_clock = self.server.actor_seconds  # what the actors said with their fragments
        self.check_scale()  # the learner made its core for initial_agents(): normally no change
        self.server.start()
        self._status_at = 0.0
        self._started_at = time.monotonic()
        self._done_at: float | None = None  # when the version saying `done` was published
        # Known workers without a stream open at the end: they see `done` only on a stream they
        # open later (release_workers waits for them).
        self._away_at_end: set[str] = set()
        self._retired_until = float("-inf")  # time.time() until which a scale down's workers retire

    def train(self) -> bool:
        """Fragments in, updates, parameters out, status about once a second, until the core is
        done; then announce `done` under a new version (unless the last update did) and save.
        False if SIGTERM came first (preemption): the version the core has is saved, cleanly."""
        stopped = threading.Event()
        deadline = getattr(self.core.cfg, "progress_deadline_seconds", deadline_mod.DEFAULT_SECONDS)
        if self.group.size == 1:  # of ranks, a stop of one is its group's restart, not the run's end
            c = self.core.counters
            deadline_mod.watch(deadline, lambda: (c.env_steps, c.updates), stopped)
        try:
            return self._train()
        except PeerLost as exc:
            # Between updates (the wait that noticed it never runs collectives): this rank's
            # version is the group's last, which rank 0 saves as cleanly as on SIGTERM; the group
            # is restarted from it.
            log.warning("%s: saving and leaving so that the group restarts", exc)
            return self._preempted()
        finally:
            stopped.set()

    def _train(self) -> bool:
        core, server = self.core, self.server
        params = self.publish()
        while not core.done:
            # A learner rank that committed to the group's next update takes nothing more (what came
            # now would be the next update's) and runs it before it stops: the others may be in its
            # collectives already (leaving then failed them, and rank 0 saved nothing clean: seen in
            # CI). A peer that stopped first is PeerLost, as clean.
            holding = core.holding
            if preemption.requested() and not holding:
                return self._preempted()
            fragment = None if holding else server.next_fragment(timeout=self._fragment_wait)
            if fragment is not None:
                if fragment.worker_id in self._known:
                    self._known[fragment.worker_id] = time.time()
                elif len(self._known) < 2 * max_streams(self.agents):  # ids made up by the dozen: no
                    self._known[fragment.worker_id] = time.time()
                    self._known_written_at = float("-inf")  # tick() writes it within a second
                self.take(fragment)
            if core.ready():
                core.update()
                while core.ready() and not preemption.requested():  # ES bursts: several updates
                    core.update()
                params = self.publish()
            elif holding:
                time.sleep(HOLD_POLL_SECONDS)
            server.release()
            self.tick()
        while core.ready():  # the fragment that finished the run may leave a batch
            core.update()
            params = self.publish()
        if not extras_done(params.extras):  # announce the end under a new version number
            core.new_version()
            self.publish()
        self._done_at = time.monotonic()
        open_at_end, _ = server.workers()
        self._away_at_end = owed_at_end(self._known, open_at_end, time.time(), self._retired_until)
        # Those with a stream open see `done` on it: a learner restarted after the end (a SIGTERM
        # while it released its workers) waits only for the others.
        self._known = {w: t for w, t in self._known.items() if w in self._away_at_end}
        self.write_workers()
        server.release()
        core.save(clean=True)
        return True

    def _preempted(self) -> bool:
        """Stop taking experience, save the published version, and report the last status."""
        failure = preemption.failure()
        why = f"stopping ({failure})" if failure is not None else "SIGTERM"
        log.info("%s: saving version %d before exiting", why, self.core.params().version)
        started = time.monotonic()
        self.core.save(clean=True)
        self.write_status()
        log.info("checkpoint written in %.2f s; exiting %d", time.monotonic() - started,
                 EXIT_PREEMPTED)  # fmt: skip
        return False

    def run(self, ctx: RunContext, *, final_eval_timeout: float, eval_episodes: int,
            policy_for: Callable[[Params], Policy], obs_keys: tuple[str, ...] = ()) -> int:  # fmt: skip
        """train(), then `finish`; the server is stopped and the core closed however it ends.
        Returns 0, or EXIT_PREEMPTED when SIGTERM (or a learner rank's loss) stopped the training
        (after a checkpoint)."""
        code = 1
        try:
            with preemption.graceful():
                # A SIGTERM after the last look inside train() still counts: the run's end is
                # saved (clean), and the replacement finishes it. A stop for a failure elsewhere
                # (preemption.stop_for) does not: the run is done.
                if not self.train() or (preemption.requested() and preemption.failure() is None):
                    code = EXIT_PREEMPTED
                    return code
            code = finish(self, ctx, final_eval_timeout=final_eval_timeout,
                          eval_episodes=eval_episodes, policy_for=policy_for, obs_keys=obs_keys)  # fmt: skip
            return code
        finally:
            self.group.leave(code)
            self.server.stop()
            self.core.close()

    def await_final_eval(self, timeout: float) -> None:
        """Wait for the evaluator's report on the final version, at most `timeout` and only while
        `evaluator_alive`, taking fragments so that workers blocked on credits get to see `done`."""
        deadline = time.monotonic() + timeout
        self.waiting_for = ("the evaluator's report on the final version", time.monotonic(), timeout)
        while not self.core.final_evaluated and time.monotonic() < deadline:
            heard_at = self.server.evaluator_heard_at
            if not evaluator_alive(time.monotonic(), heard_at, self._started_at):
                log.warning("the evaluator is silent (%s): not waiting for its report",
                            "never heard from" if heard_at is None
                            else f"last heard from {time.monotonic() - heard_at:.0f} s ago")  # fmt: skip
                return
            fragment = self.server.next_fragment(timeout=0.25)
            if fragment is not None:
                self.take(fragment)
                self.server.release()
            self.tick()

    def release_workers(self, timeout: float) -> None:
        """Serve until every worker has seen `done` and hung up (or `timeout`): those with a stream
        open but for HANG_UP_SECONDS, those owed the end (`owed_at_end`) until they open one, and
        those polling for parameters (ASKING_SECONDS) until they have been answered the last version."""
        done_at = self._done_at if self._done_at is not None else time.monotonic()
        # Not those whose stream was open at the end and closed since: they saw `done` on it.
        missing = set(self._away_at_end)
        deadline = time.monotonic() + timeout
        done_version = self._published_version or 0  # the version that said `done`
        while time.monotonic() < deadline:
            open_now, opened_at = self.server.workers()
            missing, listening = owed_the_end(done_at, time.monotonic(), missing, open_now, opened_at)
            if not listening and not missing and not self.server.behind(done_version, ASKING_SECONDS):
                if open_now:
                    log.warning("%d workers kept their streams open after the end: %s",
                                len(open_now), sorted(open_now))  # fmt: skip
                return
            self.server.next_fragment(timeout=0.1)
            self.server.release()
        if missing:
            log.warning("%d workers did not come back to see the end: %s", len(missing), sorted(missing))

    def write_workers(self) -> None:
        self._known_written_at = time.monotonic()
        write_json(self.workers_path, {"workers": self._known})

    def tick(self) -> None:
        if time.monotonic() - self._known_written_at >= WORKERS_WRITE_SECONDS:
            self.write_workers()
        while True:
            try:
                self.core.record_eval(self.evals.get_nowait())
            except queue.Empty:
                break
        if time.monotonic() - self._scale_at >= SCALE_CHECK_SECONDS and self.check_scale():
            self.write_status()  # report the new count now
        elif time.monotonic() - self._status_at >= 1.0:
            self.write_status()

    def check_scale(self) -> bool:
        """Apply the count in SCALE_FILE if the file changed (a stat, read only when its mtime,
        size or inode moved) and names another count; True if the count changed. A missing or
        invalid file leaves the count as it is."""
        self._scale_at = time.monotonic()
        try:
            st = os.stat(self.scale_path)
            seen: tuple[int, int, int] | None = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            seen = None
        if seen == self._scale_seen:
            return False
        self._scale_seen = seen
        agents = read_scale(self.scale_path.parent) if seen is not None else None
        if agents is None or agents == self.agents:
            return False
        self.set_agents(agents)
        return True

    def set_agents(self, agents: int) -> None:
        """Serve `agents` agents from now on: the server's stream capacity (lowering it refuses
        new streams past the cap; open ones stay), the core, and what is published (a core may
        start a new version with the new hand-out)."""
        log.info("scaled from %d to %d agents (%s)", self.agents, agents, SCALE_FILE)
        if agents < self.agents:
            self._retired_until = time.time() + RETIRE_SECONDS
        self.agents = agents
        # Workers a scale down retires never come back: only those heard from from now on count.
        self._known = {}
        self.write_workers()
        self.server.set_max_streams(max_streams(agents))
        self.core.set_agents(agents)
        self.publish()

    def publish(self) -> Params:
        """Publish the core's parameters. The end (`done`) is never said under a version number a
        worker may hold already (an update skipped keeps the number): that worker would be answered
        "unchanged" and never see it, nor the evaluator evaluate it (seen: a run whose every
        update was skipped waited out its final evaluation)."""
        params = self.core.params()
        if extras_done(params.extras) and params.version == self._published_version:
            self.core.new_version()
            params = self.core.params()
        self.server.publish(params)
        self._published_version = params.version
        return params

    def _status(self, connected_streams: int) -> dict[str, Any]:
        status = self.core.status(connected_streams)
        status["agents"] = self.agents  # the count served now (the spec's, or the last scale's)
        if self.waiting_for is not None and not self.core.final_evaluated:
            what, since, most = self.waiting_for
            status["waiting_for"] = f"{what}: {time.monotonic() - since:.0f} s so far, {most:.0f} s at most"
        return status

    def write_status(self) -> None:
        self._status_at = time.monotonic()
        stats = self.server.stats
        status = self._status(stats.get("connected_streams", 0))
        status["wire_rejections"] = {name: stats.get(counter, 0) for name, counter in WIRE_REJECTIONS}
        self.snapshot["status"] = status
        if self.status_path is not None:
            try:
                write_json(self.status_path, status)
            except OSError as exc:  # a full disk: the Status RPC still answers; said once
                if not self._status_unwritten:
                    log.error("cannot write %s (%s): status is served over gRPC only", self.status_path, exc)
                self._status_unwritten = True


def read_workers(path: os.PathLike[str] | str) -> dict[str, float]:
    """Worker id -> when it last sent experience (wall clock), from a WORKERS_FILE; none if it is
    missing or not one (the learner's own file, but a bad one must not stop the run)."""
    try:
        with open(path) as f:
            workers = json.load(f)["workers"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    if not isinstance(workers, dict):
        return {}
    return {w: float(t) for w, t in list(workers.items())[:100_000]
            if isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t)}  # fmt: skip


def evaluator_alive(now: float, heard_at: float | None, started_at: float) -> bool:
    """Whether the evaluator may still report, at `now` (monotonic): it called the learner at
    `heard_at` (None: never) and the learner started at `started_at`."""
    if heard_at is not None:
        return now - heard_at < EVALUATOR_SILENCE_SECONDS
    return now - started_at < EVALUATOR_START_SECONDS


def owed_at_end(known: dict[str, float], open_at_end: set[str], now: float, retired_until: float) -> set[str]:
    """The workers owed the end when the run finishes at `now` (time.time()): those heard from
    (`known`: when last) within RECENT_WORKER_SECONDS, and after `retired_until` (the workers a
    scale down retired, heard from only until then, never come back), with no stream open."""
    cutoff = max(now - RECENT_WORKER_SECONDS, retired_until)
    return {w for w, t in known.items() if t > cutoff} - open_at_end


def owed_the_end(
    done_at: float, now: float, missing: set[str], open_now: set[str], opened_at: dict[str, float]
) -> tuple[set[str], set[str]]:
    """Whom the learner still serves for at `now` (monotonic), after the end at `done_at`:
    (workers of `missing` that have not opened a stream since the end, workers with a stream open
    that opened it, or saw the end, less than HANG_UP_SECONDS ago)."""
    missing = {w for w in missing if opened_at.get(w, float("-inf")) < done_at}
    listening = {w for w in open_now if now - max(done_at, opened_at.get(w, now)) < HANG_UP_SECONDS}
    return missing, listening


def finish(
    loop: ServingLoop,
    ctx: RunContext,
    *,
    final_eval_timeout: float,
    eval_episodes: int,
    policy_for: Callable[[Params], Policy],
    obs_keys: tuple[str, ...] = (),
) -> int:
    """End a trained run: the final evaluation (from the evaluator, or here if none arrives; of
    the observation keys `obs_keys`), the last status, workers released. Returns 0."""
    core = loop.core
    if not loop.group.is_root:  # the evaluator reports to rank 0, which evaluates and reports
        loop.release_workers(timeout=RELEASE_SECONDS)
        log.info("run complete (learner rank %d): exiting", loop.group.rank)
        return 0
    loop.await_final_eval(final_eval_timeout if ctx.has_evaluator else 0.0)
    if not core.final_evaluated:
        log.warning("no evaluation of the final version arrived; evaluating it here")
        params = core.params()
        envs = EnvBatch(ctx.env, eval_episodes, seed=eval_seed(ctx.seed), training=False, obs_keys=obs_keys)
        try:
            result = evaluate(envs, policy_for(params))
        finally:
            envs.close()
        core.record_eval(result.report(params.version, extras_env_steps(params.extras)))
    core.save(clean=True)  # the final evaluation in the checkpoint too: load_policy says what status says
    loop.write_status()
    if problem := core.training_problem():  # Succeeded means it trained
        log.error("the run did not train: %s", problem)
        raise RoleFailed(EXIT_NOT_TRAINED, f"the run did not train: {problem}")
    loop.release_workers(timeout=RELEASE_SECONDS)
    log.info("run complete: version %d evaluated, %d workers still connected; exiting",
             core.params().version, loop.server.stats.get("connected_streams", 0))  # fmt: skip
    return 0

"""The replay role: one shard of the run's transitions, its own process (a pod with a stable name on
Kubernetes). Actors insert over its experience stream; the learner samples with Replay.Sample. Its
rate limiter (replay.RatioLimiter) holds the rows sampled per row inserted at `replay_ratio`: an
actor whose insert would outrun the learner gets no credit back until the learner has sampled; a
sample that would outrun the actors waits, and is answered "not ready" after its wait.

Nothing lost that can be kept: on SIGTERM the shard saves its rows to the experiment's volume
(replay/shard-I.npz) and its replacement restores them, checked as inserts are; every few seconds
it notes its counters (replay/shard-I.json), so that a replacement after a SIGKILL knows how many
rows were lost and its counters never go back. A save the disk will not take, or one that cannot
be read back, is counted lost, never a crash. No save once the run is done or its folder is being
deleted. The shard ends (exit 0) once the learner's parameters say the run is done and its actors
have hung up.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from surreal.protocol.client import LearnerClient, ProtocolError
from surreal.protocol.codec import TensorSpec
from surreal.protocol.ratelimit import RejectionLog
from surreal.protocol.server import LearnerServer
from surreal.protocol.types import Fragment, ReplayState, Sampled
from surreal.runtime import preemption
from surreal.runtime.checkpoint import write_json
from surreal.runtime.envs.make import EnvSpaces, spaces_for
from surreal.runtime.envs.ref import EnvRef, resolve
from surreal.runtime.exits import EXIT_PREEMPTED
from surreal.runtime.offpolicy import obs
from surreal.runtime.offpolicy.config import OffPolicyConfig
from surreal.runtime.offpolicy.replay import DELETING_FILE, RatioLimiter, Rows, error_buffer_for
from surreal.runtime.onpolicy.fragment import Rejection
from surreal.runtime.run import RunContext, extras_done
from surreal.runtime.scale import read_scale
from surreal.runtime.serving import SPARE_STREAMS, initial_agents, max_streams

log = logging.getLogger(__name__)

NOTE_SECONDS = 2.0  # how often the counters are noted (what a SIGKILL's replacement reads)
DONE_POLL_SECONDS = 1.0  # how often the shard asks the learner whether the run is done
RELEASE_SECONDS = 30.0  # after the end, the longest it serves for its actors to see it
MAX_EPISODES_KEPT = 10_000  # episode returns kept for the learner between two of its samples
SHARD_DIR = "replay"
STATUS_FILE = "status.json"  # the learner's (serving.py), in the experiment's folder
# What the shard's server refused and what its actors said of their time (LearnerServer.stats),
# under ReplayState's names.
WIRE_COUNTS = {"malformed": "rejected_invalid", "unauthenticated": "rejected_auth",
               "undecodable": "rejected_undecodable", "too_many_streams": "rejected_streams",
               "bad_samples": "rejected_samples", "actor_span_ms": "actor_span_ms",
               "actor_waited_ms": "actor_waited_ms"}  # fmt: skip
COUNTS = ("inserted", "sampled", "lost", "refused", *WIRE_COUNTS)  # noted, and summed over lives


fields = obs.transition_fields


def schema(sp: EnvSpaces) -> dict[str, TensorSpec]:
    """What a fragment from an actor must look like on the wire (rows of fields, episode returns)."""
    return {**{name: TensorSpec(dtype, (None, *shape)) for name, (dtype, shape) in fields(sp).items()},
            "episode_returns": TensorSpec(np.float64, (None,))}  # fmt: skip


def rows_problem(sp: EnvSpaces, tensors: dict[str, np.ndarray], max_abs_reward: float) -> Rejection | None:
    """Why rows that have the schema's shapes cannot be true (an insert's, a save's), or None."""
    rows = {len(tensors[name]) for name in fields(sp)}
    if len(rows) != 1 or 0 in rows:
        return Rejection("malformed", "its fields hold different numbers of rows, or none")
    for name in ("actions", "rewards"):
        if not np.isfinite(tensors[name]).all():
            return Rejection("non_finite", f"non-finite {name}")
    actions = tensors["actions"]
    if sp.discrete and (actions.min() < 0 or actions.max() >= sp.action_dim):
        return Rejection("out_of_range", f"an action outside the Discrete's 0..{sp.action_dim - 1}")
    if not sp.discrete and np.abs(actions).max() > 1.0:
        return Rejection("out_of_range", "an action outside [-1, 1] (the policy's squashed space)")
    if np.abs(tensors["rewards"]).max() > max_abs_reward:
        return Rejection("out_of_range", f"a reward beyond max_abs_reward ({max_abs_reward:g})")
    found = obs.problem(sp, tensors)
    return None if found is None else Rejection("bad_observation", found)


def fragment_problem(
    sp: EnvSpaces, tensors: dict[str, np.ndarray], max_abs_reward: float, max_rows: int, max_return: float
) -> Rejection | None:
    """Why an actor's fragment cannot be true, or None: its rows (rows_problem), more of them than its
    worker can have stepped (`max_rows`: env steps are rows inserted), or episode returns that no
    episode could have earned (`max_return`), or more of them than steps (an episode ends on one)."""
    rows, returns = len(tensors["rewards"]), tensors["episode_returns"]
    if rows > max_rows:
        return Rejection("too_many_rows", f"more rows than a worker steps in a fragment ({max_rows:,})")
    if len(returns) > rows:
        return Rejection("malformed", "more episode returns than rows")
    if not np.isfinite(returns).all():
        return Rejection("non_finite", "non-finite episode_returns")
    if len(returns) and np.abs(returns).max() > max_return:
        return Rejection("out_of_range", f"an episode return beyond max_abs_reward x the longest episode "
                         f"({max_return:g})")  # fmt: skip
    return rows_problem(sp, tensors, max_abs_reward)


def longest_episode(env: EnvRef) -> int | None:
    """The most steps an episode of `env` lasts: the max_episode_steps it is made with (create gives
    one to every environment without a time limit of its own), else its registration's; None if
    it has neither."""
    steps = env.kwargs.get("max_episode_steps")
    if steps is None:
        found = resolve(env)
        steps = (gym.spec(found) if isinstance(found, str) else found).max_episode_steps
    return int(steps) if steps else None


class Shard:
    """A shard's rows, its limiter and its counters; `sample` is what Replay.Sample calls (on a
    thread of the server's executor). A fragment holds at most what a worker of `agents` agents
    steps (a worker hosts at most all of the run's), an episode at most `episode_steps` rewards
    (None: no time limit, only finite returns)."""

    def __init__(self, cfg: OffPolicyConfig, sp: EnvSpaces, index: int, shards: int, exp_dir: Path,
                 *, agents: int = 1, episode_steps: int | None = None) -> None:  # fmt: skip
        self.cfg, self.index, self.spaces = cfg, index, sp
        self.agents = agents
        self.max_return = cfg.max_abs_reward * episode_steps if episode_steps else float("inf")
        self.rows = Rows(fields(sp), -(-cfg.buffer_size // shards))
        self.limiter = RatioLimiter(cfg.replay_ratio, max(1, cfg.learning_starts // shards),
                                    error_buffer_for(cfg.batch_size))  # fmt: skip
        self.rng = np.random.default_rng([index, int(time.time())])
        self.lock = threading.Lock()  # rows: inserts (main thread) and samples (server threads)
        self.dir = exp_dir / SHARD_DIR
        self.save_path = self.dir / f"shard-{index}.npz"
        self.note_path = self.dir / f"shard-{index}.json"
        self.episodes: deque[float] = deque(maxlen=MAX_EPISODES_KEPT)
        self.refused = 0
        # One line for the first refusal, then a summary at most every 10 s: an actor whose every
        # fragment is refused (rewards beyond max_abs_reward, NaNs) must not grow the log by the MB.
        self.refusals = RejectionLog(log, "fragment")
        # Counters of earlier lives, and what this life started with.
        self.base = dict.fromkeys(COUNTS, 0)
        self.wire: Callable[[], dict[str, int]] = dict  # what its server refused (serve() sets it)
        self.restored = 0
        self._from_limiter = (0, 0)  # the limiter's counts that are not this life's own inserts/samples
        self._note_failed = False

    @property
    def max_rows(self) -> int:
        return self.cfg.fragment_length * self.cfg.envs_per_agent * self.agents

    def restore(self) -> None:
        """Take what a predecessor left: its saved rows (SIGTERM) or, without them, its last note
        (the rows it held then are lost)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            note = json.loads(self.note_path.read_text())
            self.base = {k: int(note.get(k, 0)) for k in self.base}
            held = int(note.get("size", 0))
        except (OSError, ValueError, TypeError, AttributeError):
            held = 0
        self.save_path.with_name(self.save_path.name + ".tmp.npz").unlink(missing_ok=True)  # a killed save's
        if self.save_path.exists():
            self._take_save()
        self.base["lost"] += max(0, held - self.restored)
        if self.restored:
            self.limiter.restored(self.restored)
        self._from_limiter = (self.limiter.inserted, self.limiter.sampled)
        log.info("replay shard %d: restored %d rows, %d lost before this start", self.index, self.restored,
                 self.base["lost"])  # fmt: skip
        self.note()

    def _take_save(self) -> None:
        """Add the predecessor's saved rows, checked as an insert's are. A save that cannot be read
        (truncated by a full disk, damaged, of another config) or whose rows no actor could have
        sent is set aside as *.unreadable, never retried; its rows are counted lost."""
        try:
            rows = self.rows.read(self.save_path)
            count = len(rows["rewards"])
            problem = rows_problem(self.spaces, rows, self.cfg.max_abs_reward) if count else None
        except Exception as exc:  # noqa: BLE001 - numpy and zipfile raise a dozen kinds for a damaged file
            problem = Rejection("unreadable", f"{type(exc).__name__}: {str(exc)[:200]}")
        if problem is None:
            self.rows.add(rows)
            self.restored = count
            self.save_path.unlink(missing_ok=True)  # a later SIGKILL must not bring back stale rows
            return
        aside = self.save_path.with_name(self.save_path.name + ".unreadable")
        log.error("replay shard %d: cannot restore %s (%s); set aside as %s, its rows counted lost",
                  self.index, self.save_path, problem.detail, aside.name)  # fmt: skip
        try:
            self.save_path.replace(aside)
        except OSError:
            self.save_path.unlink(missing_ok=True)

    def state(self) -> ReplayState:
        lim, (ins0, smp0), wire = self.limiter, self._from_limiter, self.wire()
        return ReplayState(size=self.rows.size, inserted=self.base["inserted"] + lim.inserted - ins0,
                           sampled=self.base["sampled"] + lim.sampled - smp0, restored=self.restored,
                           lost=self.base["lost"], refused=self.base["refused"] + self.refused,
                           **{k: self.base[k] + wire.get(n, 0) for k, n in WIRE_COUNTS.items()})  # fmt: skip

    def note(self) -> None:
        """Note the counters for a replacement. A disk that will not take them (full) is said
        once and the shard goes on: its replacement then counts from an older note."""
        self.refusals.flush()
        state = self.state()
        try:
            write_json(self.note_path, {"size": state.size, **{k: getattr(state, k) for k in COUNTS}})
        except OSError as exc:
            if not self._note_failed:
                log.error("replay shard %d: cannot note its counters in %s (%s); going on",
                          self.index, self.note_path, exc.strerror or exc)  # fmt: skip
            self._note_failed = True
            return
        self._note_failed = False

    def insert(self, fragment: Fragment, wait: float) -> bool | None:
        """Insert `fragment`'s rows once the limiter lets them in: True, False if it still held
        them after `wait` s (call again), None if the fragment was refused for its contents."""
        tensors = fragment.tensors
        problem = fragment_problem(
            self.spaces, tensors, self.cfg.max_abs_reward, self.max_rows, self.max_return
        )
        if problem is not None:
            self.refused += 1
            self.refusals.note(fragment.worker_id, *problem)
            return None
        n = len(tensors["rewards"])
        if not self.limiter.await_insert(n, wait):
            return False
        with self.lock:
            self.rows.add({name: tensors[name] for name in self.rows.data})
            self.episodes.extend(tensors["episode_returns"].tolist())
        return True

    def sample(self, n: int, wait: float) -> Sampled:
        ready = self.limiter.await_sample(n, wait)
        with self.lock:
            rows = self.rows.sample(n, self.rng) if ready else None
            returns = tuple(self.episodes)
            self.episodes.clear()
        return Sampled(rows, self.state(), returns)

    def save(self) -> None:
        """Save the rows for the replacement and note the counters. Rows the disk will not take
        (full) are counted lost in the note, so that the replacement does not count them again."""
        with self.lock:
            try:
                self.rows.save(self.save_path)
                log.info("replay shard %d: saved %d rows to %s", self.index, self.rows.size, self.save_path)
            except OSError as exc:
                log.error("replay shard %d: cannot save its %d rows to %s (%s): they are lost", self.index,
                          self.rows.size, self.save_path, exc.strerror or exc)  # fmt: skip
                self.base["lost"] += self.rows.size
                self.rows.clear()
        self.note()


def serve(shard: Shard, token: str, **options: Any) -> LearnerServer:
    """The shard's server (not started): actors' experience streams in its schema, with credits
    granted once a fragment is in (credit_on_take=False: the limiter holds them), Replay.Sample,
    its state as status, and the calls it refuses (ReplayState.malformed and on) counted in the state."""
    server = LearnerServer(token=token, experience_schema=schema(shard.spaces), credit_on_take=False,
                           credits_per_stream=shard.cfg.credits_per_worker,
                           status_provider=lambda: dataclasses.asdict(shard.state()), sampler=shard.sample,
                           **options)  # fmt: skip
    shard.wire = lambda: server.stats
    return server


def run_replay(cfg: OffPolicyConfig, ctx: RunContext) -> int:
    """Serve one shard until the run is done (0), or SIGTERM (saved: EXIT_PREEMPTED)."""
    cfg.validate()
    sp = spaces_for(ctx.env).keep(cfg.obs_keys)
    index, addr = ctx.index, ctx.replay_for(ctx.index)
    shard = Shard(cfg, sp, index, len(ctx.replay_addrs), ctx.exp_dir, agents=initial_agents(ctx),
                  episode_steps=longest_episode(ctx.env))  # fmt: skip
    shard.restore()
    host, port = addr.rsplit(":", 1)
    server = serve(shard, ctx.token, port=int(port), host="0.0.0.0" if ctx.bind_all else host,
                   max_streams=max_streams(initial_agents(ctx)))  # fmt: skip
    learner = LearnerClient(ctx.learner_for(0), ctx.token)
    server.start()
    try:
        with preemption.graceful():
            return _serve(shard, server, learner, ctx)
    finally:
        shard.refusals.flush(force=True)
        server.stop()
        learner.close()


def _serve(shard: Shard, server: LearnerServer, learner: LearnerClient, ctx: RunContext) -> int:
    noted_at = asked_at = time.monotonic()
    done_at: float | None = None
    known = -1  # the learner's version last seen
    pending: Fragment | None = None
    while True:
        if preemption.requested():
            return _stop(shard, done_at is not None or _run_over(ctx), ctx.exp_dir)
        now = time.monotonic()
        if now - noted_at >= NOTE_SECONDS:
            shard.note()
            noted_at = now
            # `surreal scale` to more agents: their workers' streams (the learner reads the same file)
            agents = read_scale(ctx.exp_dir) or server.max_streams - SPARE_STREAMS
            server.set_max_streams(max_streams(agents))
            shard.agents = max(shard.agents, agents)  # a worker from before a scale down may still send
        if done_at is None and now - asked_at >= DONE_POLL_SECONDS:
            asked_at = now
            known, done = _learner_done(learner, known)
            if done:
                done_at = now
                log.info("the run is done: taking every insert until the actors hang up")
                shard.limiter.open()
        if done_at is not None:
            open_now, _ = server.workers()
            if not open_now or now - done_at > RELEASE_SECONDS:
                shard.note()
                return 0
        if pending is None:
            pending = server.next_fragment(timeout=0.1)
            if pending is None:
                continue
        if shard.insert(pending, wait=0.1) is not False:
            pending = None
            server.release()


def _stop(shard: Shard, run_over: bool, exp_dir: Path) -> int:
    """SIGTERM: save the rows for a replacement (EXIT_PREEMPTED), unless none will ever start: the
    run is over (0) or its folder is being deleted."""
    if run_over:
        shard.note()
        return 0
    if not (exp_dir / DELETING_FILE).exists():
        shard.save()
    return EXIT_PREEMPTED


def _run_over(ctx: RunContext) -> bool:
    """Whether the learner's last status says the run's steps are in, read from the experiment's
    folder that the shard saves into (the same volume on every backend). It outlives the learner,
    which a launcher stops the shards after, maybe before the shard has polled it for the end, so
    asking the learner itself would not do; a run that cannot say so gets the save."""
    try:
        steps = json.loads((ctx.exp_dir / STATUS_FILE).read_text()).get("env_steps")
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(steps, int) and steps >= ctx.total_steps


def _learner_done(learner: LearnerClient, known: int) -> tuple[int, bool]:
    """(the learner's latest version, whether its parameters say the run is done); not done while
    the learner cannot be reached (a restarting learner is not an ended run)."""
    try:
        params = learner.get_params(known, timeout=5.0)
    except ProtocolError:
        return known, False
    if params is None:
        return known, False
    return params.version, extras_done(params.extras)

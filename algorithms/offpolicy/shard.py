"""The replay role: one shard of the run's transitions, its own process (a pod with a stable name on
Kubernetes). Actors insert over its experience stream; the learner samples with Replay.Sample. Its
rate limiter (replay.RatioLimiter) holds the rows sampled per row inserted at `replay_ratio`: an
actor whose insert would outrun the learner gets no credit back until the learner has sampled; a
sample that would outrun the actors waits, and is answered "not ready" after its wait.

Nothing lost that can be kept: on SIGTERM the shard saves its rows to the experiment's volume
(replay/shard-I.npz) and its replacement restores them; every few seconds it notes its counters
(replay/shard-I.json), so that a replacement after a SIGKILL knows how many rows were lost and
its counters never go back. The shard ends (exit 0) once the learner's parameters say the run is
done and its actors have hung up.
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

import numpy as np

from surreal.algorithms.common import preemption
from surreal.algorithms.common.checkpoint import write_json
from surreal.algorithms.common.exits import EXIT_PREEMPTED
from surreal.algorithms.common.run import RunContext, extras_done
from surreal.algorithms.common.scale import read_scale
from surreal.algorithms.common.serving import SPARE_STREAMS, initial_agents, max_streams
from surreal.algorithms.envs.make import EnvSpaces, spaces_for
from surreal.algorithms.offpolicy import obs
from surreal.algorithms.offpolicy.config import OffPolicyConfig
from surreal.algorithms.offpolicy.replay import RatioLimiter, Rows, error_buffer_for
from surreal.protocol.client import LearnerClient, ProtocolError
from surreal.protocol.codec import TensorSpec
from surreal.protocol.server import LearnerServer
from surreal.protocol.types import Fragment, ReplayState, Sampled

log = logging.getLogger(__name__)

NOTE_SECONDS = 2.0  # how often the counters are noted (what a SIGKILL's replacement reads)
DONE_POLL_SECONDS = 1.0  # how often the shard asks the learner whether the run is done
RELEASE_SECONDS = 30.0  # after the end, the longest it serves for its actors to see it
MAX_EPISODES_KEPT = 10_000  # episode returns kept for the learner between two of its samples
SHARD_DIR = "replay"


def fields(sp: EnvSpaces) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """A transition's fields: name -> (dtype, row shape); the observation's as obs.fields keeps them."""
    f32 = np.dtype(np.float32)
    return {**obs.fields(sp), "actions": (f32, (sp.action_dim,)), "rewards": (f32, ()),
            "terminated": (np.dtype(bool), ())}  # fmt: skip


def schema(sp: EnvSpaces) -> dict[str, TensorSpec]:
    """What a fragment from an actor must look like on the wire (rows of fields, episode returns)."""
    return {**{name: TensorSpec(dtype, (None, *shape)) for name, (dtype, shape) in fields(sp).items()},
            "episode_returns": TensorSpec(np.float64, (None,))}  # fmt: skip


def rows_problem(sp: EnvSpaces, tensors: dict[str, np.ndarray], max_abs_reward: float) -> str | None:
    """Why a fragment that has the schema's shapes cannot be true, or None."""
    rows = {len(tensors[name]) for name in fields(sp)}
    if len(rows) != 1 or 0 in rows:
        return "its fields hold different numbers of rows, or none"
    for name in ("actions", "rewards", "episode_returns"):
        if not np.isfinite(tensors[name]).all():
            return f"non-finite {name}"
    if np.abs(tensors["actions"]).max() > 1.0:
        return "an action outside [-1, 1] (the policy's squashed space)"
    if np.abs(tensors["rewards"]).max() > max_abs_reward:
        return f"a reward beyond max_abs_reward ({max_abs_reward:g})"
    return obs.problem(sp, tensors)


class Shard:
    """A shard's rows, its limiter and its counters; `sample` is what Replay.Sample calls (on a
    thread of the server's executor)."""

    def __init__(self, cfg: OffPolicyConfig, sp: EnvSpaces, index: int, shards: int, exp_dir: Path) -> None:
        self.cfg, self.index, self.spaces = cfg, index, sp
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
        # Counters of earlier lives (inserted, sampled), and what this life started with.
        self.base = {"inserted": 0, "sampled": 0, "lost": 0, "refused": 0, "malformed": 0}
        self.malformed: Callable[[], int] = lambda: 0  # streams its server ended (serve() sets it)
        self.restored = 0
        self._from_limiter = (0, 0)  # the limiter's counts that are not this life's own inserts/samples

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
        if self.save_path.exists():
            try:
                self.restored = self.rows.load(self.save_path)
            except (OSError, ValueError) as exc:
                log.error("cannot restore %s (%s): starting empty", self.save_path, exc)
            self.save_path.unlink(missing_ok=True)  # a later SIGKILL must not bring back stale rows
        self.base["lost"] += max(0, held - self.restored)
        if self.restored:
            self.limiter.restored(self.restored)
        self._from_limiter = (self.limiter.inserted, self.limiter.sampled)
        log.info("replay shard %d: restored %d rows, %d lost before this start", self.index, self.restored,
                 self.base["lost"])  # fmt: skip
        self.note()

    def state(self) -> ReplayState:
        lim, (ins0, smp0) = self.limiter, self._from_limiter
        return ReplayState(size=self.rows.size, inserted=self.base["inserted"] + lim.inserted - ins0,
                           sampled=self.base["sampled"] + lim.sampled - smp0, restored=self.restored,
                           lost=self.base["lost"], refused=self.base["refused"] + self.refused,
                           malformed=self.base["malformed"] + self.malformed())  # fmt: skip

    def note(self) -> None:
        state = self.state()
        write_json(self.note_path, {"size": state.size, **{k: getattr(state, k) for k in self.base}})

    def insert(self, fragment: Fragment, wait: float) -> bool | None:
        """Insert `fragment`'s rows once the limiter lets them in: True, False if it still held
        them after `wait` s (call again), None if the fragment was refused for its contents."""
        tensors = fragment.tensors
        problem = rows_problem(self.spaces, tensors, self.cfg.max_abs_reward)
        if problem is not None:
            self.refused += 1
            log.warning("refused a fragment of %s: %s", fragment.worker_id, problem)
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
        with self.lock:
            self.rows.save(self.save_path)
        self.note()
        log.info("replay shard %d: saved %d rows to %s", self.index, self.rows.size, self.save_path)


def serve(shard: Shard, token: str, **options: Any) -> LearnerServer:
    """The shard's server (not started): actors' experience streams in its schema, with credits
    granted once a fragment is in (credit_on_take=False: the limiter holds them), Replay.Sample,
    its state as status, and the streams it ends for a malformed fragment counted in the state."""
    server = LearnerServer(token=token, experience_schema=schema(shard.spaces), credit_on_take=False,
                           credits_per_stream=shard.cfg.credits_per_worker,
                           status_provider=lambda: dataclasses.asdict(shard.state()), sampler=shard.sample,
                           **options)  # fmt: skip
    shard.malformed = lambda: server.stats["rejected_invalid"]
    return server


def run_replay(cfg: OffPolicyConfig, ctx: RunContext) -> int:
    """Serve one shard until the run is done (0), or SIGTERM (saved: EXIT_PREEMPTED)."""
    cfg.validate()
    sp = spaces_for(ctx.env).keep(cfg.obs_keys)
    index, addr = ctx.index, ctx.replay_for(ctx.index)
    shard = Shard(cfg, sp, index, len(ctx.replay_addrs), ctx.exp_dir)
    shard.restore()
    host, port = addr.rsplit(":", 1)
    server = serve(shard, ctx.token, port=int(port), host="0.0.0.0" if ctx.bind_all else host,
                   max_streams=max_streams(initial_agents(ctx)))  # fmt: skip
    learner = LearnerClient(ctx.learner_for(0), ctx.token)
    server.start()
    try:
        with preemption.graceful():
            return _serve(shard, server, learner, ctx.exp_dir)
    finally:
        server.stop()
        learner.close()


def _serve(shard: Shard, server: LearnerServer, learner: LearnerClient, exp_dir: Path) -> int:
    noted_at = asked_at = time.monotonic()
    done_at: float | None = None
    known = -1  # the learner's version last seen
    pending: Fragment | None = None
    while True:
        if preemption.requested():
            if done_at is not None:  # the run is over: nothing to keep for a replacement
                return 0
            shard.save()
            return EXIT_PREEMPTED
        now = time.monotonic()
        if now - noted_at >= NOTE_SECONDS:
            shard.note()
            noted_at = now
            # `surreal scale` to more agents: their workers' streams (the learner reads the same file)
            server.set_max_streams(max_streams(read_scale(exp_dir) or server.max_streams - SPARE_STREAMS))
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

"""The off-policy learner: samples minibatches from every replay shard (a thread per shard keeps a
few ready, so the update, not the transport, is the cap), runs the algorithm's `update` on each,
and publishes the policy at least every `publish_seconds`. It serves parameters, status and
evaluations through the runtime's ServingLoop, as every learner does; experience never reaches it
(actors insert into the shards). Its env steps are the rows the shards took in, as they report
with every answer, so a restarted learner goes on from its checkpoint with the replay intact.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import queue
import threading
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from surreal.protocol.client import LearnerClient, ProtocolError
from surreal.protocol.ratelimit import RejectionLog
from surreal.protocol.types import Params, ReplayState
from surreal.runtime import hooks, progress
from surreal.runtime.checkpoint import load_checkpoint
from surreal.runtime.device import resolve_device
from surreal.runtime.envs.make import spaces_for
from surreal.runtime.offpolicy import obs
from surreal.runtime.offpolicy.config import OffPolicyConfig
from surreal.runtime.offpolicy.evaluator import eval_policy
from surreal.runtime.progress import LearnerProgress, anneal
from surreal.runtime.run import RunContext, progress_extras
from surreal.runtime.serving import ServingLoop, initial_agents
from surreal.runtime.tb import Scalars

if TYPE_CHECKING:
    from surreal.algorithms.api import OffPolicy

log = logging.getLogger(__name__)

PREFETCH = 4  # batches each shard's thread keeps ready
SAMPLE_WAIT_SECONDS = 0.2  # how long a shard may hold a sample for its limiter before answering
RATE_WINDOW = 64  # (time, inserted, sampled, seconds updating) points the rates are measured over
RECENT_RETURNS = 20
STATE_SECONDS = 1.0  # how stale a shard's counts in status may grow while no update takes a batch
REPLAY_COUNTS = tuple(f.name for f in dataclasses.fields(ReplayState))
# The shards' wire refusals in status, named as a learner's own "wire_rejections" (serving.py).
REPLAY_WIRE = {"unauthenticated": "unauthenticated", "undecodable": "undecodable",
               "invalid_stream": "malformed", "too_many_streams": "too_many_streams",
               "bad_sample": "bad_samples"}  # fmt: skip
TB_EVERY = 100  # updates between TensorBoard points (hundreds a second: every one would be megabytes)
# The replay's figures TensorBoard draws (replay_status's), as `surreal status` shows them.
TB_REPLAY = ("size", "replay_ratio", "refused_fragments", "lost")


class Shards:
    """The learner's side of the replay: one thread per shard samples `rows` at a time into a queue."""

    def __init__(self, addrs: tuple[str, ...], token: str, rows: int) -> None:
        self.batches: queue.Queue[dict[str, np.ndarray]] = queue.Queue(PREFETCH * len(addrs))
        self.states: list[ReplayState | None] = [None] * len(addrs)  # None: not heard from yet
        # Per shard, (span, waited) ms its actors said since this learner first heard from it: only
        # growth counts (a shard first heard after a restart brings no history into the window, and
        # one restarted from an older note does not go back).
        self.actor_ms: list[tuple[int, int]] = [(0, 0)] * len(addrs)
        self.reachable = [False] * len(addrs)
        self.returns: deque[float] = deque(maxlen=100_000)
        self._stop = threading.Event()
        self._clients = [LearnerClient(a, token) for a in addrs]
        self._threads = [threading.Thread(target=self._pull, args=(i, rows), daemon=True,
                                          name=f"surreal-replay-{i}") for i in range(len(addrs))]  # fmt: skip
        for t in self._threads:
            t.start()

    def _pull(self, i: int, rows: int) -> None:
        client, backoff = self._clients[i], 0.1
        while not self._stop.is_set():
            try:
                sampled = client.sample(rows, SAMPLE_WAIT_SECONDS)
            except ProtocolError as exc:
                if self.reachable[i]:
                    log.warning("replay shard %d: %s", i, exc)
                self.reachable[i] = False
                self._stop.wait(backoff)
                backoff = min(2 * backoff, 2.0)
                continue
            backoff, self.reachable[i] = 0.1, True
            self._heard(i, sampled.state)
            self.returns.extend(sampled.episode_returns)
            while sampled.rows is not None and not self._stop.is_set():
                try:
                    self.batches.put(sampled.rows, timeout=STATE_SECONDS)
                    break
                except queue.Full:
                    # No update takes batches (the run is done, its final evaluation under way): the
                    # shard's counts still reach status, or its last refusals would never show there.
                    self._refresh(i)

    def _refresh(self, i: int) -> None:
        """Shard `i`'s state from its Status, without a sample."""
        try:
            found = self._clients[i].status(timeout=STATE_SECONDS)
            self._heard(i, ReplayState(**{k: int(found[k]) for k in REPLAY_COUNTS if k in found}))
        except (ProtocolError, ValueError, TypeError, AttributeError):
            pass

    def _heard(self, i: int, state: ReplayState) -> None:
        before = self.states[i]
        if before is not None:
            span, waited = self.actor_ms[i]
            self.actor_ms[i] = (span + max(0, state.actor_span_ms - before.actor_span_ms),
                                waited + max(0, state.actor_waited_ms - before.actor_waited_ms))  # fmt: skip
        self.states[i] = state

    def actor_seconds(self) -> tuple[float, float]:
        """(span, waited) seconds the shards' actors said since this learner heard from them."""
        said = list(self.actor_ms)
        return sum(s for s, _ in said) / 1000, sum(w for _, w in said) / 1000

    def total(self, field: str) -> int:
        return sum(getattr(s, field) for s in self.states if s is not None)

    def status(self) -> list[dict[str, Any]]:
        pairs = zip(self.states, self.reachable, strict=True)
        return [{**(dataclasses.asdict(s) if s else {}), "reachable": r} for s, r in pairs]

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(5.0)
        for c in self._clients:
            c.close()


@dataclasses.dataclass
class Counters(progress.Counters):
    """env_steps: rows inserted into the replay shards."""

    rows_trained: int = 0


class Learner(LearnerProgress):
    """The ServingLoop's core (serving.LearnerCore) for an off-policy algorithm."""

    recent_returns = RECENT_RETURNS
    holding = False

    def __init__(self, algo: OffPolicy, cfg: OffPolicyConfig, ctx: RunContext, shards: Shards | None) -> None:
        self.algo, self.cfg, self.total_steps = algo, cfg, ctx.total_steps
        self.spaces = spaces_for(ctx.env).keep(cfg.obs_keys)
        self.device = resolve_device(cfg.device)
        torch.manual_seed(ctx.seed)
        self.nets: Any = algo.make(cfg, self.spaces).to(self.device)
        self.counters = Counters()
        self.train_returns: deque[float] = deque(maxlen=1000)
        self.shards = shards
        self._init_progress()
        self._ckpt_dir: Path = ctx.exp_dir / "checkpoints"
        self._tb: Scalars | None = Scalars(ctx.exp_dir / "tb")
        self._tb_updates = 0  # updates at the last TensorBoard point
        self._rates: deque[tuple[float, int, int]] = deque(maxlen=RATE_WINDOW)
        self._updating = 0.0  # seconds in train_on since start: the update's share of the learner's time
        self._batch: dict[str, np.ndarray] | None = None
        self._unpublished = False
        self._stats: dict[str, Any] = {}  # the last update's, as it returned them (tensors)
        self._skips = RejectionLog(log, "update")
        self._restore()

    # --- training

    @property
    def done(self) -> bool:
        return self.counters.env_steps >= self.total_steps

    def _hear(self) -> None:
        """The shards' counts: env steps (never back: a lost shard's count is kept in its note) and
        the training episodes they passed on."""
        if self.shards is None:
            return
        c = self.counters
        inserted = self.shards.total("inserted")
        if inserted > c.env_steps:
            c.env_steps = inserted
            self._note_steps()
        while self.shards.returns:
            self.train_returns.append(self.shards.returns.popleft())
            c.episodes += 1
        now = time.monotonic()  # the window stops at done: a finished run shows the rates it trained at
        if not self.done and (not self._rates or now - self._rates[-1][0] >= 0.5):
            self._rates.append((now, inserted, self.shards.total("sampled")))

    def busy_seconds(self) -> float:
        return self._updating

    def actor_seconds(self) -> tuple[float, float]:
        """The actors insert into the shards, which pass on what they said of their time."""
        return super().actor_seconds() if self.shards is None else self.shards.actor_seconds()

    def ready(self) -> bool:
        """A batch is at hand, and the last update's version has been published (the serving loop
        runs updates while its core is ready, then publishes: each update() is one version)."""
        self._hear()
        if self.done or self.shards is None or self._unpublished:
            return False
        if self._batch is None:
            try:
                self._batch = self.shards.batches.get(timeout=0.05)
            except queue.Empty:
                return False
        return True

    def update(self) -> None:
        """Updates on the batches at hand for up to publish_seconds; one new version. A burst whose
        statistics or weights come out non-finite is undone as a whole (weights and optimizer state
        as they were before it) and its updates counted skipped, as the on-policy learner does
        with each update: one check, one host read, per version and not per update."""
        started = time.monotonic()
        if self.cfg.anneal_lr:
            anneal(self.nets.optimizers().values(), 1.0 - self.counters.env_steps / self.total_steps)
        saved, burst = self._snapshot(), []
        while self._batch is not None:
            burst.append(self.train_on(self._batch))
            self._batch = None
            if time.monotonic() - started >= self.cfg.publish_seconds:
                break
            try:
                self._batch = self.shards.batches.get_nowait() if self.shards else None
            except queue.Empty:
                break
        c = self.counters
        if self._finite([stats for stats, _ in burst]):
            c.updates += len(burst)
            c.rows_trained += sum(rows for _, rows in burst)
        else:
            self._rollback(saved)
            c.skipped_updates += len(burst)
            self._skips.note("learner", "non_finite_update", f"a non-finite statistic or weight: "
                             f"{len(burst)} updates were undone and the weights kept")  # fmt: skip
        self.counters.version += 1
        self._unpublished = True
        self._hear()
        if self._tb is not None and self.counters.updates - self._tb_updates >= TB_EVERY:
            self._log_update(self._tb)
        if self.checkpoint_due():
            self.save()

    def _log_update(self, tb: Scalars) -> None:
        """What PPO's learner writes, keyed by env steps (`surreal plot` draws progress/episode_return),
        and the replay: the update's statistics (SAC's Q values among them), the rate and training
        returns, the replay's size, the ratio it held, the update's share, what it refused and lost."""
        c, step = self.counters, self.counters.env_steps
        self._tb_updates = c.updates
        tb.add("train", self.last_stats, step)
        progress = {"steps_per_second": self.steps_per_second(), "episodes": c.episodes,
                    "skipped_updates": c.skipped_updates}  # fmt: skip
        if self.train_returns:
            progress["episode_return"] = self.train_return()
        if (share := self.update_share()) is not None:
            progress["update_share"] = share
        tb.add("progress", progress, step)
        replay = self.replay_status()
        tb.add("replay", {k: replay[k] for k in TB_REPLAY if replay.get(k) is not None}, step)

    @property
    def last_stats(self) -> dict[str, float]:
        """The last update's statistics as numbers: read when shown, not at each update, so that a
        learner on a GPU does not wait for its kernels once per statistic per update."""
        return {k: float(v) for k, v in self._stats.items()}

    def train_on(self, rows: dict[str, np.ndarray]) -> tuple[dict[str, Any], int]:
        """One `update` of the algorithm on `rows` (a replay sample: obs.batch packs them): its
        statistics and the rows it trained on."""
        started = time.perf_counter()
        batch = {k: torch.from_numpy(v).to(self.device) for k, v in obs.batch(self.spaces, rows).items()}
        stats = hooks.statistics(self.algo, "update", hooks.call(self.algo, "update", self.algo.update,
                                                                   self.nets, batch, self.cfg))  # fmt: skip
        self._stats = stats
        self._updating += time.perf_counter() - started
        return stats, len(rows["rewards"])

    def _snapshot(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Copies of the networks' state and their optimizers', to undo a burst that went non-finite."""
        weights = {k: v.detach().clone() for k, v in self.nets.state_dict().items()}
        return weights, copy.deepcopy({k: o.state_dict() for k, o in self.nets.optimizers().items()})

    def _rollback(self, saved: tuple[dict[str, torch.Tensor], dict[str, Any]]) -> None:
        weights, optimizers = saved
        self.nets.load_state_dict(weights)
        for name, optimizer in self.nets.optimizers().items():
            optimizer.load_state_dict(optimizers[name])
            optimizer.zero_grad(set_to_none=True)

    def _finite(self, burst: list[dict[str, Any]]) -> bool:
        """Every statistic of the burst and every weight is finite (one host read)."""
        values = [torch.as_tensor(v, dtype=torch.float64).to(self.device).reshape(1)
                  for stats in burst for v in stats.values()]  # fmt: skip
        checks = [torch.isfinite(torch.cat(values)).all()] if values else []
        checks += [torch.isfinite(p).all() for p in self.nets.parameters()]
        return bool(torch.stack(checks).all())

    def new_version(self) -> None:
        self.counters.version += 1

    def params(self) -> Params:
        self._unpublished = False
        weights = {k: v.detach().cpu().numpy() for k, v in self.nets.actor.state_dict().items()}
        return Params(self.counters.version, weights, progress_extras(self.counters.env_steps, self.done))

    def set_agents(self, num_agents: int) -> None:
        """`surreal scale`: the shards' limiters hold the ratio whatever the count."""

    # --- status, checkpoints

    def replay_status(self) -> dict[str, Any]:
        """The replay's size, its rates over the last half minute or so and the ratio held there (the
        learner's share of that time in updates is every learner's `update_share`)."""
        if self.shards is None:
            return {}
        first, last = (self._rates[0], self._rates[-1]) if self._rates else ((0, 0, 0),) * 2
        (t0, i0, s0), (t1, i1, s1) = first, last
        dt = t1 - t0
        return {"size": self.shards.total("size"), "inserts_per_second": (i1 - i0) / dt if dt > 0 else 0.0,
                "samples_per_second": (s1 - s0) / dt if dt > 0 else 0.0,
                "replay_ratio": (s1 - s0) / (i1 - i0) if i1 > i0 else None,
                "target_ratio": self.cfg.replay_ratio,
                "lost": self.shards.total("lost"), "restored": self.shards.total("restored"),
                "refused_fragments": self.shards.total("refused"),
                "malformed_streams": self.shards.total("malformed"),
                "wire_rejections": {name: self.shards.total(field) for name, field in REPLAY_WIRE.items()},
                "shards": self.shards.status()}  # fmt: skip

    def status(self, connected_actors: int = 0) -> dict[str, Any]:
        return {**self.contract_status(0, connected_actors), "rows_trained": self.counters.rows_trained,
                "skipped_updates": self.counters.skipped_updates, "train": self.last_stats,
                "replay": self.replay_status()}  # fmt: skip

    def save(self, *, clean: bool = False) -> None:
        optimizers = {k: o.state_dict() for k, o in self.nets.optimizers().items()}
        self._save_checkpoint(self._ckpt_dir, {"model": self.nets.state_dict(), "optimizers": optimizers},
                              clean=clean)  # fmt: skip

    def _restore(self) -> None:
        saved = load_checkpoint(self._ckpt_dir)
        if saved is None:
            self.save()  # one from the start: a learner killed before its first periodic one resumes
            return
        _, state = self._restore_checkpoint(saved)
        self.nets.load_state_dict(state["model"])
        for name, optimizer in self.nets.optimizers().items():
            optimizer.load_state_dict(state["optimizers"][name])

    def close(self) -> None:
        self._skips.flush(force=True)
        if self.shards is not None:
            self.shards.close()
        if self._tb is not None:
            self._tb.close()


def run_learner(algo: OffPolicy, cfg: OffPolicyConfig, ctx: RunContext) -> int:
    """Sample, update and publish until `total_steps` transitions are in and the final version is
    evaluated; exit 0. Resumes from the last checkpoint in `ctx.exp_dir`."""
    cfg.validate()
    torch.set_num_threads(cfg.learner_threads)
    shards = Shards(ctx.replay_addrs, ctx.token, max(1, cfg.batch_size))
    learner = Learner(algo, cfg, ctx, shards)
    loop = ServingLoop(learner, ctx, take=lambda fragment: None, experience_schema={}, credits_per_stream=1,
                       agents=initial_agents(ctx), fragment_wait=0.0)  # fmt: skip
    return loop.run(ctx, final_eval_timeout=cfg.final_eval_timeout, eval_episodes=cfg.eval_episodes,
                    policy_for=lambda params: eval_policy(algo, cfg, learner.spaces, params),
                    obs_keys=cfg.obs_keys)  # fmt: skip

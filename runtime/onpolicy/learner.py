"""The on-policy learner: fragments in, an algorithm's updates (api.OnPolicy.update), parameters out.

`Learner` has no networking, so tests and the serial harness drive it directly: add_fragment()
until ready(), update(), params(). `run_learner` serves it over the protocol.

A learner is one rank of a group (runtime/ranks.py); a single learner is `RankGroup()`, the group of
one. The group enters in two places only: the intake (`SoloIntake` or `GroupIntake`: how fragments
are counted and when a batch is due), and the algorithm's update, through the reduce hook (the
group: `sum`, `sum_grads`, the identity in a group of one).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import logging
import math
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from surreal.protocol.ratelimit import RejectionLog
from surreal.protocol.types import Fragment, Params
from surreal.runtime import hooks, progress
from surreal.runtime.checkpoint import load_checkpoint
from surreal.runtime.device import resolve_device
from surreal.runtime.envs.make import EnvSpaces, spaces_for
from surreal.runtime.exits import EXIT_COLLECTIVE_FAILED
from surreal.runtime.normalization import RunningMeanStd
from surreal.runtime.onpolicy.batch import TENSORS, Batch
from surreal.runtime.onpolicy.config import OnPolicyConfig
from surreal.runtime.onpolicy.evaluator import eval_policy
from surreal.runtime.onpolicy.fragment import (
    REJECT_REASONS,
    experience_schema,
    obs_stats_dim,
    open_fragment,
)
from surreal.runtime.onpolicy.gae import compute_gae
from surreal.runtime.progress import LearnerProgress, anneal
from surreal.runtime.ranks import (
    CollectiveFailed,
    Pods,
    RankGroup,
    group_from_environ,
)
from surreal.runtime.run import RunContext, progress_extras
from surreal.runtime.serving import ServingLoop, initial_agents
from surreal.runtime.tb import Scalars

if TYPE_CHECKING:
    from surreal.algorithms.api import OnPolicy

log = logging.getLogger(__name__)

VALUE_CHUNK = 4096  # observations per forward pass when the learner values a batch

Entry = tuple[dict[str, np.ndarray], int, str]  # a fragment kept for an update: tensors, policy lag, worker


@dataclasses.dataclass
class Counters(progress.Counters):
    """env_steps: received from actors, dropped fragments included."""

    dropped_fragments: int = 0  # fragments more than max_policy_lag versions old (or from the future)
    # fragments rejected whole, by reason (fragment.REJECT_REASONS); their steps do not count
    rejected: dict[str, int] = dataclasses.field(default_factory=lambda: dict.fromkeys(REJECT_REASONS, 0))


class Learner(LearnerProgress):
    recent_returns = 20  # training episodes that status's train_return averages

    def __init__(
        self,
        algo: OnPolicy,
        cfg: OnPolicyConfig,
        spaces: EnvSpaces,
        total_steps: int,
        *,
        seed: int = 0,
        exp_dir: Path | None = None,
        group: RankGroup | None = None,
    ) -> None:
        cfg.validate()
        self.algo, self.cfg, self.spaces, self.total_steps = algo, cfg, spaces, total_steps
        # Learner ranks (ranks.py): each takes what its own actors send; the group's batch is theirs.
        self.group = group or RankGroup()
        self.update_seconds = 0.0  # in update(), since this process started (collectives included)
        self.device = resolve_device(cfg.device, self.group.rank)
        torch.manual_seed(seed)  # the initial weights are drawn on the CPU: the same on any device
        self.net: Any = hooks.call(algo, "make", algo.make, cfg, spaces)  # a Network, a torch module
        if not isinstance(self.net, torch.nn.Module):
            raise hooks.failed(algo, "make", f"returned {type(self.net).__name__}, not a torch.nn.Module")
        self.net.to(self.device)
        self._params = list(self.net.parameters())
        self.optimizer = hooks.call(algo, "optimizer", algo.optimizer, self._params, cfg)
        if not isinstance(self.optimizer, torch.optim.Optimizer):
            raise hooks.failed(algo, "optimizer", f"returned {type(self.optimizer).__name__}, not a "
                               "torch.optim.Optimizer")  # fmt: skip
        anneal([self.optimizer], 1.0)  # each group's starting lr, which anneal_lr scales
        self.obs_rms = RunningMeanStd((obs_stats_dim(spaces),))
        self.ret_rms = RunningMeanStd((1,))
        self.counters = Counters()
        self.train_returns: deque[float] = deque(maxlen=100)
        self._init_progress()
        self.intake = SoloIntake(self) if self.group.size == 1 else GroupIntake(self, self.group)
        # Whatever workers send, the log gets one line per interval about it (protocol/ratelimit.py).
        self._rejections = RejectionLog(log, "fragment")
        self._skips = RejectionLog(log, "update")
        # Rank 0 writes checkpoints and TensorBoard; every rank starts from what rank 0 restored.
        root_dir = exp_dir if self.group.is_root else None
        self._ckpt_dir = root_dir / "checkpoints" if root_dir else None
        self._tb = Scalars(root_dir / "tb") if root_dir else None
        if (self._ckpt_dir is not None or self.group.size > 1) and not self._restore():
            # A checkpoint from the start: a learner that dies before its first periodic one then
            # comes back past the versions it published, not at version 0 again.
            self.save()

    # --- progress ---

    @property
    def done(self) -> bool:
        return self.counters.env_steps >= self.total_steps

    @property
    def holding(self) -> bool:
        """This rank committed to the group's next update and waits for the others."""
        return self.intake.holding

    def busy_seconds(self) -> float:
        return self.update_seconds

    def ready(self) -> bool:
        """An update is due: the intake holds a batch (and, of a rank, the group agreed on it)."""
        return self.intake.ready()

    def params(self) -> Params:
        extras = {
            "obs_mean": self.obs_rms.mean.copy(),
            "obs_var": self.obs_rms.var.copy(),
            **progress_extras(self.counters.env_steps, self.done),
        }
        weights = {k: v.detach().cpu().numpy().copy() for k, v in self.net.state_dict().items()}
        return Params(self.counters.version, weights, extras)

    def new_version(self) -> None:
        """Bump the version without training (e.g. to announce `done` with unchanged weights)."""
        self.counters.version += 1

    # --- experience ---

    def add_fragment(self, fragment: Fragment) -> bool:
        """Count a fragment (its steps, episodes and statistics, stale or not) and keep it for the
        next update unless it is stale. True if kept."""
        if self.done:
            return False
        t, rejection = open_fragment(fragment.tensors, self.spaces, self.cfg)  # image stacks rebuilt
        if t is None:
            assert rejection is not None
            self._reject(fragment.worker_id, *rejection)
            return False
        lag = self.counters.version - fragment.policy_version
        kept = 0 <= lag <= self.cfg.max_policy_lag  # < 0: a version this learner never had
        self.intake.take(t, (t, lag, fragment.worker_id) if kept else None)
        return kept

    def _reject(self, worker_id: str, reason: str, detail: str) -> None:
        self.intake.reject(reason)
        self._rejections.note(worker_id, reason, detail)

    # --- update ---

    def update(self) -> dict[str, float]:
        """The algorithm's update on the buffered fragments; bumps the version. Returns {} (and keeps the
        weights, optimizer state and version) if no fragment was usable or the loss or a gradient
        was not finite. Of a rank: the whole group's update (every rank calls it once all have
        committed), on the union of their batches."""
        started = time.perf_counter()
        try:
            return self._update()
        finally:
            self.update_seconds += time.perf_counter() - started

    def _update(self) -> dict[str, float]:
        cfg, c = self.cfg, self.counters
        batch, lags = self._prepare(self.intake.next_batch())  # of a rank: the group's counters first
        mine = [len(batch.obs), sum(lags), len(lags)]
        rows, lag_sum, lag_count = self.group.sum(torch.tensor(mine, dtype=torch.float64)).tolist()
        if rows == 0:
            return {}
        frac = 1.0 - (c.env_steps - rows) / self.total_steps
        lr = anneal([self.optimizer], frac if cfg.anneal_lr else 1.0)
        saved = self._snapshot()
        batch = dataclasses.replace(batch, group_rows=int(rows))
        update = self.algo.update
        stats = hooks.statistics(self.algo, "update", hooks.call(
            self.algo, "update", update, self.net, self.optimizer, batch, cfg, self.group))  # fmt: skip
        # One host read: the statistics, and whether every weight is still finite (the same on
        # every rank: the group's statistics, the same gradients).
        finite = torch.stack([torch.isfinite(p).all() for p in self._params]).all()
        values = [torch.as_tensor(v, dtype=torch.float64).to(self.device).reshape(1) for v in stats.values()]
        *numbers, ok = torch.cat([*values, finite.double().reshape(1)]).tolist()
        if not (ok and all(math.isfinite(v) for v in numbers)):
            self._rollback(saved)
            c.skipped_updates += 1
            self._skips.note("learner", "non_finite_loss", "a non-finite loss or gradient; the "
                             "update was skipped and the weights kept")  # fmt: skip
            return {}
        c.updates += 1
        c.version += 1
        stats = dict(zip(stats, numbers, strict=True))
        stats.update(learning_rate=lr, batch_steps=rows, policy_lag=lag_sum / lag_count)
        if len(batch.obs):  # of this rank's share
            stats["explained_variance"] = _explained_variance(batch.values, batch.returns)
        self._log_update(stats)
        if self.checkpoint_due():
            self.save()
        return stats

    def _prepare(self, batch: list[Entry]) -> tuple[Batch, list[int]]:
        """Values of every observation in one forward pass, then GAE per fragment, flattened; and
        the policy lags of the fragments used. A fragment whose values, advantages or returns are
        not finite (finite inputs can still overflow) is rejected; the batch may have no rows."""
        shape = self.spaces.obs_shape
        frags = [t for t, _, _ in batch]
        rows = [f["obs"].reshape(-1, *shape) for f in frags] + [f["trunc_obs"] for f in frags]
        # Every observation crosses to the device once (images as uint8): values are computed
        # there, and the training rows are gathered there from the same tensor.
        obs_all = self._to_device(
            np.concatenate(rows) if rows else np.empty((0, *shape), self.spaces.obs_dtype)
        )
        with torch.no_grad():  # in chunks: a CNN's activations of a whole batch at once are large
            values = torch.cat([self.net.value(chunk) for chunk in obs_all.split(VALUE_CHUNK)]).cpu().numpy()
        starts = np.cumsum([0] + [len(r) for r in rows])
        parts = np.split(values, starts[1:-1]) if rows else []
        obs_values, trunc_values = parts[: len(frags)], parts[len(frags) :]
        out: dict[str, list[np.ndarray]] = {f.name: [self._empty(f.name)] for f in TENSORS}
        lags: list[int] = []
        for i, ((f, lag, worker), v, tv) in enumerate(zip(batch, obs_values, trunc_values, strict=True)):
            t_len, n = f["rewards"].shape
            v = v.reshape(t_len + 1, n)
            with np.errstate(over="ignore", invalid="ignore"):  # caught just below
                adv, ret = self._advantages(f, v, tv)
            if not (np.isfinite(v).all() and np.isfinite(tv).all() and np.isfinite(adv).all()
                    and np.isfinite(ret).all()):  # fmt: skip
                self._reject(worker, "non_finite_targets", "values, advantages or returns overflowed")
                continue
            lags.append(lag)
            out["obs"].append(np.arange(starts[i], starts[i] + t_len * n))  # rows of obs_all
            for key, arr in (("actions", f["actions"]), ("logprobs", f["logprobs"]), ("values", v[:t_len]),
                             ("advantages", adv), ("returns", ret)):  # fmt: skip
                out[key].append(arr.reshape(t_len * n, *arr.shape[2:]))
        data = {k: self._to_device(np.concatenate(v)) for k, v in out.items()}
        data["obs"] = obs_all[data["obs"]]
        return Batch(**data, group_rows=len(data["obs"])), lags

    def _empty(self, key: str) -> np.ndarray:
        """No rows of `key`, in its dtype and shape: a batch's first part (a rank may have none)."""
        if key == "obs":
            return np.empty(0, np.int64)  # rows of obs_all
        if key == "actions":
            sp = self.spaces
            return np.empty((0,), np.int64) if sp.discrete else np.empty((0, sp.action_dim), np.float32)
        return np.empty(0, np.float32)

    def _to_device(self, array: np.ndarray) -> torch.Tensor:
        """`array` as a tensor on the learner's device: through pinned memory to a GPU."""
        tensor = torch.from_numpy(array)
        if self.device.type != "cuda":
            return tensor
        return tensor.pin_memory().to(self.device, non_blocking=True)

    def _advantages(
        self, f: dict[str, np.ndarray], values: np.ndarray, trunc_obs_values: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """GAE of one fragment given the values of its T+1 observation rows and truncations."""
        cfg = self.cfg
        t_len = len(f["rewards"])
        trunc_values = np.zeros_like(f["rewards"])
        trunc_values[f["trunc_index"][:, 0], f["trunc_index"][:, 1]] = trunc_obs_values
        rewards = f["rewards"]
        if cfg.norm_reward:
            scale = 1.0 / np.sqrt(self.ret_rms.var[0] + 1e-8)
            rewards = np.clip(rewards * scale, -cfg.reward_clip, cfg.reward_clip)
        return compute_gae(
            rewards, values[:t_len], values[t_len], f["terminated"], f["truncated"],
            trunc_values, cfg.gamma, cfg.gae_lambda,
        )  # fmt: skip

    def _snapshot(self) -> tuple[list[torch.Tensor], dict[str, Any]]:
        """Copies of the weights and the optimizer state, to undo an update that went non-finite."""
        return [p.detach().clone() for p in self._params], copy.deepcopy(self.optimizer.state_dict())

    def _rollback(self, saved: tuple[list[torch.Tensor], dict[str, Any]]) -> None:
        weights, optimizer_state = saved
        with torch.no_grad():
            for p, w in zip(self._params, weights, strict=True):
                p.copy_(w)
        self.optimizer.load_state_dict(optimizer_state)
        self.optimizer.zero_grad(set_to_none=True)

    def set_agents(self, num_agents: int) -> None:
        """`surreal scale`: nothing changes here. The settings are the create-time preset's, and a
        batch waits for `steps_per_update` env steps whoever sends them."""

    # --- evaluation, status, checkpoints ---

    def status(self, connected_actors: int = 0) -> dict[str, Any]:
        """The contract's status dict (see status.json); of a rank, with the group's fields."""
        c = self.counters
        return {
            **self.contract_status(c.dropped_fragments, connected_actors),
            "rejected_fragments": dict(c.rejected),
            "skipped_updates": c.skipped_updates,
            "update_seconds": self.update_seconds,  # in updates since this process started
            **self.intake.status(connected_actors),
        }

    def _log_update(self, stats: dict[str, float]) -> None:
        if self._tb is None:
            return
        c, step = self.counters, self.counters.env_steps
        self._tb.add("train", stats, step)
        progress = {
            "steps_per_second": self.steps_per_second(),
            "episodes": c.episodes,
            "dropped_fragments": c.dropped_fragments,
            "skipped_updates": c.skipped_updates,
        }
        if self.train_returns:
            progress["episode_return"] = self.train_return()
        self._tb.add("progress", progress, step)
        self._tb.add("rejected_fragments", c.rejected, step)
        for name, values in self.intake.scalars().items():
            self._tb.add(name, values, step)

    def save(self, *, clean: bool = False) -> None:
        """Checkpoint model, optimizer, normalization statistics and counters (atomically; the
        envelope and `clean`: LearnerProgress._save_checkpoint)."""
        if self._ckpt_dir is None:
            return
        stats = {**self.obs_rms.to_arrays("obs"), **self.ret_rms.to_arrays("ret")}
        state = {
            "model": self.net.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "normalization": {k: torch.from_numpy(v) for k, v in stats.items()},
        }
        self._save_checkpoint(self._ckpt_dir, state, clean=clean)

    def _restore(self) -> bool:
        """Resume from the last checkpoint: rank 0 reads it and sends it to the other ranks.
        False when there is none (a fresh start)."""
        saved = load_checkpoint(self._ckpt_dir) if self._ckpt_dir is not None else None
        saved = self.group.broadcast(saved)
        if saved is None:
            if self.group.size > 1:  # the same seed draws the same weights, unless threads differ
                self.net.load_state_dict(self.group.broadcast(self.net.state_dict()))
            return False
        _, state = self._restore_checkpoint(saved)  # counters, returns, evaluation, version
        self.net.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        for pg in self.optimizer.param_groups:  # a checkpoint older than initial_lr: the config's
            pg.setdefault("initial_lr", self.cfg.learning_rate)
        stats = {k: v.numpy() for k, v in state["normalization"].items()}
        self.obs_rms.moments = RunningMeanStd.moments_from_arrays(stats, "obs")
        self.ret_rms.moments = RunningMeanStd.moments_from_arrays(stats, "ret")
        return True

    def close(self) -> None:
        self._rejections.flush(force=True)
        self._skips.flush(force=True)
        if self._tb is not None:
            self._tb.close()


# --- intake: fragments in, a batch out; the counters and statistics they change ---


class SoloIntake:
    """A single learner's intake: each fragment's counts and statistics go into the learner's at
    once, and a batch is due when it holds `steps_per_update` steps (or the run is done and some
    are left)."""

    holding = False  # a single learner never waits for peers

    def __init__(self, learner: Learner) -> None:
        self.learner = learner
        self.into: Learner | Pending = learner  # what take() counts into
        self.batch: list[Entry] = []
        self.steps = 0  # env steps in `batch`

    def take(self, t: dict[str, np.ndarray], entry: Entry | None) -> None:
        """Count fragment `t`; keep `entry` for an update (None: stale, dropped)."""
        into, steps = self.into, t["rewards"].size
        c = into.counters
        c.env_steps += steps
        c.episodes += len(t["episode_returns"])
        into.train_returns.extend(t["episode_returns"].tolist())
        # Stale or not, the fragment saw real states: the statistics take them either way.
        into.obs_rms.merge(RunningMeanStd.moments_from_arrays(t, "obs"))
        into.ret_rms.merge(RunningMeanStd.moments_from_arrays(t, "ret"))
        if entry is None:
            c.dropped_fragments += 1
        else:
            self._keep(entry, steps)
        if into is self.learner:  # a rank's counters move when its group combines them
            self.learner._note_steps()

    def _keep(self, entry: Entry, steps: int) -> None:
        self.batch.append(entry)
        self.steps += steps

    def reject(self, reason: str) -> None:
        """Count a fragment rejected whole (its steps do not count)."""
        rejected = self.into.counters.rejected
        rejected[reason] = rejected.get(reason, 0) + 1

    def ready(self) -> bool:
        return self.steps >= self.learner.cfg.steps_per_update or (self.learner.done and self.steps > 0)

    def next_batch(self) -> list[Entry]:
        """The batch to update on; the next one starts empty."""
        batch, self.batch, self.steps = self.batch, [], 0
        return batch

    def status(self, connected_actors: int) -> dict[str, Any]:
        return {}

    def scalars(self) -> dict[str, dict[str, float]]:
        return {}


@dataclasses.dataclass
class Pending:
    """What one rank took in since its group last combined counters (every update), under the
    learner's names: the group's counters and statistics change only then, the same way on every
    rank."""

    obs_rms: RunningMeanStd
    ret_rms: RunningMeanStd
    counters: Counters = dataclasses.field(default_factory=Counters)
    train_returns: list[float] = dataclasses.field(default_factory=list)
    streams: int = 0  # experience streams open on this rank's server (its last status)


class GroupIntake(SoloIntake):
    """A rank's intake. What it takes is counted in `Pending` and combined with the other ranks'
    at each update, in rank order (the same counters and statistics on every rank). An update is
    due when the group as a whole holds a batch (RankGroup.add_steps counts every rank's intake)
    and every rank has committed to it (RankGroup.commit: the wait never blocks; PeerLost if a
    peer left or went silent). A fragment taken once the group's batch was full is the next
    update's, as with one learner, whose batch ends with the fragment that fills it."""

    into: Pending

    def __init__(self, learner: Learner, group: RankGroup) -> None:
        super().__init__(learner)
        self.group = group
        self.into = self._new_pending(streams=0)
        self.carry: list[Entry] = []  # taken once the group's batch was full: the next update's
        self.round = 0  # updates this group did since it formed: the commitment's key
        self.holding = False  # committed to the next update, waiting for the others
        self.rank_env_steps = [0] * group.size  # env steps each rank took in, since it formed
        self.rank_streams = [0] * group.size  # as of the last update
        self.pods = Pods.from_environ().pods  # the learner pods the ranks spread over

    def _new_pending(self, streams: int) -> Pending:
        dim = (obs_stats_dim(self.learner.spaces),)
        return Pending(obs_rms=RunningMeanStd(dim), ret_rms=RunningMeanStd((1,)), streams=streams)

    def _keep(self, entry: Entry, steps: int) -> None:
        if self.group.add_steps(self.round, steps) - steps >= self.learner.cfg.steps_per_update:
            # The group's batch was full before this fragment came: it is the next update's.
            self.carry.append(entry)
            self.group.add_steps(self.round + 1, steps)
        else:
            super()._keep(entry, steps)

    def ready(self) -> bool:
        if self.learner.done:  # the group ends together, after the update that reached total_steps
            return False
        self.group.keep_alive()
        if not self.holding:
            if self.group.group_steps(self.round) < self.learner.cfg.steps_per_update:
                return False
            self.group.commit(self.round)
            self.holding = True
        return self.group.all_committed(self.round)

    def next_batch(self) -> list[Entry]:
        """This rank's part of the group's batch, once every rank's Pending is in the counters and
        statistics (GAE uses them); the carried fragments start the next one."""
        batch, self.batch, self.carry = self.batch, self.carry, []
        self.steps = sum(t["rewards"].size for t, _, _ in self.batch)
        self.holding = False
        self.round += 1
        self._combine()
        return batch

    def _combine(self) -> None:
        """Every rank's Pending into the counters and statistics, in rank order."""
        learner, c = self.learner, self.learner.counters
        mine, self.into = self.into, self._new_pending(self.into.streams)
        everyone = self.group.gather(mine)
        for rank, p in enumerate(everyone):
            c.env_steps += p.counters.env_steps
            c.episodes += p.counters.episodes
            c.dropped_fragments += p.counters.dropped_fragments
            for reason, n in p.counters.rejected.items():
                c.rejected[reason] = c.rejected.get(reason, 0) + n
            learner.train_returns.extend(p.train_returns)
            learner.obs_rms.merge(p.obs_rms.moments)
            learner.ret_rms.merge(p.ret_rms.moments)
            self.rank_env_steps[rank] += p.counters.env_steps
            self.rank_streams[rank] = p.streams
        if any(p.counters.env_steps for p in everyone):
            learner._note_steps()

    def status(self, connected_actors: int) -> dict[str, Any]:
        """The group's fields: its streams (this rank's now, the others' as of the last update),
        what each rank took in, and (since this rank started) its time in collectives."""
        self.into.streams = connected_actors  # the others hear it at the next update
        streams = list(self.rank_streams)
        streams[self.group.rank] = connected_actors
        per_pod = self.group.size // self.pods  # ranks of one learner pod (--learner-pods)
        return {
            "connected_actors": sum(streams),
            "group_restarts": self.group.restarts,
            "collective_seconds": self.group.collective_seconds,  # benchmarks read it
            "learners": [{"rank": r, "pod": r // per_pod, "env_steps": s, "connected_actors": n}
                         for r, (s, n) in enumerate(zip(self.rank_env_steps, streams, strict=True))],
        }  # fmt: skip

    def scalars(self) -> dict[str, dict[str, float]]:
        """TensorBoard's extra group: what each rank took in."""
        return {"learners": {f"rank{r}_env_steps": n for r, n in enumerate(self.rank_env_steps)}}


def _explained_variance(values: torch.Tensor, returns: torch.Tensor) -> float:
    var = returns.var()
    return float(1.0 - (returns - values).var() / var) if var > 0 else float("nan")


def run_learner(algo: OnPolicy, cfg: OnPolicyConfig, ctx: RunContext) -> int:
    """Serve experience and `algo`'s updates until `total_steps` env steps are trained on and the
    final version is evaluated; exit 0. Resumes from the last checkpoint in `ctx.exp_dir`."""
    cfg.validate()
    join = datetime.timedelta(seconds=cfg.rank_join_seconds)
    torch.set_num_threads(cfg.learner_threads)
    spaces = spaces_for(ctx.env).keep(cfg.obs_keys)
    group = group_from_environ(ctx.learners, join)
    learner = Learner(algo, cfg, spaces, ctx.total_steps, seed=ctx.seed, exp_dir=ctx.exp_dir, group=group)
    loop = ServingLoop(
        learner, ctx, take=learner.add_fragment,  # ignores fragments once the run is done
        experience_schema=experience_schema(spaces), credits_per_stream=cfg.credits_per_worker,
        agents=initial_agents(ctx), group=group,
    )  # fmt: skip
    try:
        return loop.run(
            ctx, final_eval_timeout=cfg.final_eval_timeout, eval_episodes=cfg.eval_episodes,
            policy_for=lambda params: eval_policy(cfg, spaces, params, ctx.seed, algo), obs_keys=cfg.obs_keys,
        )  # fmt: skip
    except CollectiveFailed as exc:  # said as what it is (not a bug's trace), for its agent to tell
        log.error("%s", exc)
        return EXIT_COLLECTIVE_FAILED

"""PPO learner core: fragments in, clipped PPO updates, parameters out.

`PPOLearner` has no networking, so tests and the serial harness drive it directly:
add_fragment() until ready(), update(), params(). `run_learner` serves it over the protocol.

A learner is one rank of a group (common/ranks.py); a single learner is `RankGroup()`, the group of
one. The group enters in two places only: the intake (`SoloIntake` or `GroupIntake`: how fragments
are counted and when a batch is due), and the reductions inside the one PPO update
(`RankGroup.all_sum`, `RankGroup.mean_grads`: the identity in a group of one).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import logging
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import torch

from surreal.algorithms.common.checkpoint import load_checkpoint
from surreal.algorithms.common.envs import EnvSpaces, spaces_for
from surreal.algorithms.common.normalization import RunningMeanStd
from surreal.algorithms.common.progress import LearnerProgress
from surreal.algorithms.common.ranks import (
    CollectiveFailed,
    Pods,
    RankGroup,
    group_from_environ,
    launch_ranks,
)
from surreal.algorithms.common.run import (
    EXIT_COLLECTIVE_FAILED,
    RunContext,
    progress_extras,
    rank_from_environ,
)
from surreal.algorithms.common.serving import ServingLoop, initial_agents
from surreal.algorithms.common.tb import Scalars
from surreal.algorithms.ppo.config import PPOConfig
from surreal.algorithms.ppo.device import resolve_device
from surreal.algorithms.ppo.evaluator import eval_policy
from surreal.algorithms.ppo.fragment import REJECT_REASONS, experience_schema, obs_stats_dim, open_fragment
from surreal.algorithms.ppo.loss import compute_gae, ppo_loss
from surreal.algorithms.ppo.networks import make_network
from surreal.protocol.ratelimit import RejectionLog
from surreal.protocol.types import Fragment, Params

log = logging.getLogger(__name__)

BATCH_KEYS = ("obs", "actions", "logprobs", "advantages", "returns", "values")
LOSS_STATS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac")
VALUE_CHUNK = 4096  # observations per forward pass when the learner values a batch

Entry = tuple[dict[str, np.ndarray], int, str]  # a fragment kept for an update: tensors, policy lag, worker


@dataclasses.dataclass
class Counters:
    """Progress that survives restarts (saved in every checkpoint)."""

    version: int = 0  # policy version; +1 per update
    env_steps: int = 0  # env steps received from actors (dropped fragments included)
    updates: int = 0  # PPO updates done
    episodes: int = 0  # training episodes finished
    dropped_fragments: int = 0  # fragments more than max_policy_lag versions old (or from the future)
    # fragments rejected whole, by reason (fragment.REJECT_REASONS); their steps do not count
    rejected: dict[str, int] = dataclasses.field(default_factory=lambda: dict.fromkeys(REJECT_REASONS, 0))
    skipped_updates: int = 0  # updates abandoned for a non-finite loss or gradient (weights kept)
    elapsed_seconds: float = 0.0  # wall time of earlier runs of this learner (before a restart)


class PPOLearner(LearnerProgress):
    recent_returns = 20  # training episodes that status's train_return averages

    def __init__(
        self,
        cfg: PPOConfig,
        spaces: EnvSpaces,
        total_steps: int,
        *,
        seed: int = 0,
        exp_dir: Path | None = None,
        group: RankGroup | None = None,
    ) -> None:
        cfg.validate()
        self.cfg, self.spaces, self.total_steps = cfg, spaces, total_steps
        # Learner ranks (ranks.py): each takes what its own actors send; the group's batch is theirs.
        self.group = group or RankGroup()
        self.update_seconds = 0.0  # in update(), since this process started (collectives included)
        self.device = resolve_device(cfg.device, self.group.rank)
        torch.manual_seed(seed)  # the initial weights are drawn on the CPU: the same on any device
        self.net = make_network(cfg, spaces).to(self.device)
        self._params = list(self.net.parameters())
        # fused: one kernel per op over all parameter tensors instead of a Python loop.
        self.optimizer = torch.optim.Adam(self._params, lr=cfg.learning_rate, eps=cfg.adam_eps, fused=True)
        self.obs_rms = RunningMeanStd((obs_stats_dim(spaces),))
        self.ret_rms = RunningMeanStd((1,))
        self.counters = Counters()
        self.train_returns: deque[float] = deque(maxlen=100)
        self._init_progress()
        self.intake: SoloIntake | GroupIntake = (
            SoloIntake(self) if self.group.size == 1 else GroupIntake(self, self.group)
        )
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

    def ready(self) -> bool:
        """An update is due: the intake holds a batch (and, of a rank, the group agreed on it)."""
        return self.intake.ready()

    def params(self) -> Params:
        extras = {
            "obs_mean": self.obs_rms.mean.copy(),
            "obs_var": self.obs_rms.var.copy(),
            **progress_extras(self.counters.env_steps, self.done),
        }
        return Params(self.counters.version, self.net.weights_numpy(), extras)

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
        """One PPO update on the buffered fragments; bumps the version. Returns {} (and keeps the
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
        batch = self.intake.next_batch()  # of a rank: the group's counters and statistics first
        data, lags = self._prepare(batch)
        mine = [len(data["obs"]) if data is not None else 0, sum(lags), len(lags)]
        rows, lag_sum, lag_count = self.group.all_sum(torch.tensor(mine, dtype=torch.float64)).tolist()
        if rows == 0:
            return {}
        frac = 1.0 - (c.env_steps - rows) / self.total_steps
        lr = cfg.learning_rate * min(max(frac, 0.0), 1.0) if cfg.anneal_lr else cfg.learning_rate
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        stats = self._optimize(data, int(rows))
        if stats is None:
            c.skipped_updates += 1
            self._skips.note("learner", "non_finite_loss", "a non-finite loss or gradient; the "
                             "update was skipped and the weights kept")  # fmt: skip
            return {}
        c.updates += 1
        c.version += 1
        stats.update(learning_rate=lr, batch_steps=rows, policy_lag=lag_sum / lag_count)
        if data is not None:  # of this rank's share
            stats["explained_variance"] = _explained_variance(data["values"], data["returns"])
        self._log_update(stats)
        if self.checkpoint_due():
            self.save()
        return stats

    def _prepare(self, batch: list[Entry]) -> tuple[dict[str, torch.Tensor] | None, list[int]]:
        """Values of every observation in one forward pass, then GAE per fragment, flattened; and
        the policy lags of the fragments used. A fragment whose values, advantages or returns are
        not finite (finite inputs can still overflow) is rejected; None if none is left."""
        if not batch:
            return None, []
        shape = self.spaces.obs_shape
        frags = [t for t, _, _ in batch]
        rows = [f["obs"].reshape(-1, *shape) for f in frags] + [f["trunc_obs"] for f in frags]
        # Every observation crosses to the device once (images as uint8): values are computed
        # there, and the training rows are gathered there from the same tensor.
        obs_all = self._to_device(np.concatenate(rows))
        with torch.no_grad():  # in chunks: a CNN's activations of a whole batch at once are large
            values = torch.cat([self.net.value(chunk) for chunk in obs_all.split(VALUE_CHUNK)]).cpu().numpy()
        starts = np.cumsum([0] + [len(r) for r in rows])
        parts = np.split(values, starts[1:-1])
        obs_values, trunc_values = parts[: len(frags)], parts[len(frags) :]
        out: dict[str, list[np.ndarray]] = {k: [] for k in BATCH_KEYS}
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
            for key, arr in zip(BATCH_KEYS[1:], (f["actions"], f["logprobs"], adv, ret, v[:t_len]),
                                strict=True):  # fmt: skip
                out[key].append(arr.reshape(t_len * n, *arr.shape[2:]))
        if not lags:
            return None, lags
        data = {k: self._to_device(np.concatenate(v)) for k, v in out.items() if k != "obs"}
        data["obs"] = obs_all[self._to_device(np.concatenate(out["obs"]))]
        return data, lags

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

    def _optimize(self, data: dict[str, torch.Tensor] | None, rows: int) -> dict[str, float] | None:
        """`epochs` of clipped PPO over shuffled minibatches of the group's `rows` rows, of which
        this learner holds `data` (None: none). Every rank splits its rows into the same number of
        minibatches, so that each gradient step is one of the group. Stats stay tensors until one
        host read per epoch. None if a loss or gradient was not finite: the weights and optimizer
        state are then as before (on every rank)."""
        cfg = self.cfg
        size = len(data["obs"]) if data is not None else 0
        n = max(1, round(rows / cfg.minibatch_size))
        sizes = [size // n + (i < size % n) for i in range(n)]  # this rank's rows in each (tensor_split)
        weights = self._to_device(np.array(sizes, np.float64))
        finite = torch.ones((), dtype=torch.bool, device=self.device)
        epochs: list[torch.Tensor] = []  # per epoch, [n, LOSS_STATS]: each minibatch's mean stats
        saved = self._snapshot()
        for _ in range(cfg.epochs):
            # One gather per tensor per epoch; the minibatches are then contiguous views.
            perm = torch.randperm(size, device=self.device)
            shuffled = {k: v[perm] for k, v in data.items()} if data is not None else {}
            pieces = {k: v.tensor_split(n) for k, v in shuffled.items()}
            adv_norm = self._advantage_norm(shuffled.get("advantages"), weights) if cfg.norm_adv else None
            steps = []
            for i in range(n):
                mb = {k: v[i] for k, v in pieces.items()} if sizes[i] else None
                stats, ok = self._step(mb, None if adv_norm is None else adv_norm[i])
                steps.append(stats)
                finite &= ok
            # The group's means of each minibatch's stats (weighted by rows), and its finite flag.
            weighted = torch.stack(steps).double() * weights[:, None]
            summed = self.group.all_sum(
                torch.cat([weighted.flatten(), weights, (~finite).double().reshape(1)])
            )
            k = n * len(LOSS_STATS)
            means = summed[:k].view(n, len(LOSS_STATS)) / summed[k:-1, None].clamp(min=1.0)
            epochs.append(means)
            # One host read per epoch. After a non-finite step the rest of the epoch computes NaN;
            # all of it is undone.
            bad, kl = torch.stack([summed[-1], means[:, LOSS_STATS.index("approx_kl")].mean()]).tolist()
            if bad:
                self._rollback(saved)
                return None
            if cfg.target_kl is not None and kl > cfg.target_kl:
                break
        overall = torch.cat(epochs).mean(0).tolist()
        return {**dict(zip(LOSS_STATS, overall, strict=True)), "grad_steps": float(n * len(epochs))}

    def _advantage_norm(self, adv: torch.Tensor | None, weights: torch.Tensor) -> torch.Tensor:
        """[n, 2]: what normalizes the advantages of each of the n minibatches over the group
        (subtract the first, divide by the second): their mean and unbiased std (+1e-8), from the
        ranks' counts, sums and sums of squares (float64), in one reduction for the epoch. A
        minibatch of one row is left as it is. `adv`: this rank's shuffled advantages (None: none),
        `weights`: its rows in each minibatch."""
        sums = _piece_sums(adv if adv is not None else weights.new_zeros(0), len(weights))
        count, total, sq = self.group.all_sum(torch.cat([weights[:, None], sums], 1)).unbind(1)
        mean = total / count.clamp(min=1.0)
        std = ((sq - count * mean * mean) / (count - 1).clamp(min=1.0)).clamp(min=0.0).sqrt()
        several = count > 1
        norm = torch.stack([torch.where(several, mean, 0.0), torch.where(several, std + 1e-8, 1.0)], 1)
        return norm.to(adv.dtype if adv is not None else torch.float32)

    def _step(self, mb: dict[str, torch.Tensor] | None, adv_norm: torch.Tensor | None,
              ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """One gradient step on this rank's piece `mb` of a minibatch (None: no rows): the clipped
        PPO loss, its gradient averaged over the group's minibatch, clipped, then Adam. Returns the
        loss stats (zeros without rows) and whether the loss and gradient norm were finite."""
        cfg = self.cfg
        self.optimizer.zero_grad(set_to_none=True)
        if mb is None:  # this rank takes the group's step with nothing of its own
            rows, stats, finite = 0, torch.zeros(len(LOSS_STATS), device=self.device), None
        else:
            rows = len(mb["obs"])
            new_logp, entropy, new_values = self.net.evaluate(mb["obs"], mb["actions"])
            adv = mb["advantages"]
            if adv_norm is not None:
                adv = (adv - adv_norm[0]) / adv_norm[1]
            loss, loss_stats = ppo_loss(
                new_logp, mb["logprobs"], adv, new_values, mb["values"], mb["returns"], entropy,
                cfg.clip_coef, cfg.clip_vloss, cfg.ent_coef, cfg.vf_coef,
            )  # fmt: skip
            loss.backward()
            stats, finite = torch.stack([loss_stats[k] for k in LOSS_STATS]), torch.isfinite(loss)
        self.group.mean_grads(self._params, rows)  # a single learner's stay as they are
        norm = torch.nn.utils.clip_grad_norm_(self._params, cfg.max_grad_norm, foreach=True)
        self.optimizer.step()
        ok = torch.isfinite(norm)
        return stats, ok if finite is None else finite & ok

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
        """`surreal scale`: nothing here changes. The batch sizes and learning rate are the
        create-time preset's (PPOConfig, chosen for the spec's agent count), and PPO's update
        waits for `steps_per_update` env steps whoever sends them: more agents fill a batch
        sooner, fewer later. The server's stream capacity and status follow the count
        (ServingLoop)."""

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
        stats = {k: v.numpy() for k, v in state["normalization"].items()}
        self.obs_rms.moments = RunningMeanStd.moments_from_arrays(stats, "obs")
        self.ret_rms.moments = RunningMeanStd.moments_from_arrays(stats, "ret")
        return True

    def close(self) -> None:
        self._rejections.flush(force=True)
        self._skips.flush(force=True)
        if self._tb is not None:
            self._tb.close()


def _piece_sums(x: torch.Tensor, n: int) -> torch.Tensor:
    """[n, 2] float64: the sum and the sum of squares of each of `x.tensor_split(n)`'s pieces."""
    q, r = divmod(len(x), n)  # the first r pieces have q + 1 elements, the others q
    x, cut = x.double(), r * (q + 1)
    parts = (x[:cut].view(r, q + 1), x[cut:].view(n - r, q))
    return torch.cat([torch.stack([p.sum(1), p.square().sum(1)], 1) for p in parts])


# --- intake: fragments in, a batch out; the counters and statistics they change ---


class SoloIntake:
    """A single learner's intake: each fragment's counts and statistics go into the learner's at
    once, and a batch is due when it holds `steps_per_update` steps (or the run is done and some
    are left)."""

    holding = False  # a single learner never waits for peers

    def __init__(self, learner: PPOLearner) -> None:
        self.learner = learner
        self.batch: list[Entry] = []
        self.steps = 0  # env steps in `batch`

    def take(self, t: dict[str, np.ndarray], entry: Entry | None) -> None:
        """Count fragment `t`; keep `entry` for the next update (None: stale, dropped)."""
        learner, c = self.learner, self.learner.counters
        steps = t["rewards"].size
        c.env_steps += steps
        c.episodes += len(t["episode_returns"])
        learner.train_returns.extend(t["episode_returns"].tolist())
        # Stale or not, the fragment saw real states: the statistics take them either way.
        learner.obs_rms.merge(RunningMeanStd.moments_from_arrays(t, "obs"))
        learner.ret_rms.merge(RunningMeanStd.moments_from_arrays(t, "ret"))
        learner._note_steps()
        if entry is None:
            c.dropped_fragments += 1
        else:
            self.batch.append(entry)
            self.steps += steps

    def reject(self, reason: str) -> None:
        """Count a fragment rejected whole (its steps do not count)."""
        rejected = self.learner.counters.rejected
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
    """What one rank took in since its group last combined counters (every update): the group's
    counters and statistics change only then, the same way on every rank."""

    obs: RunningMeanStd
    ret: RunningMeanStd
    env_steps: int = 0
    episodes: int = 0
    dropped_fragments: int = 0
    rejected: dict[str, int] = dataclasses.field(default_factory=dict)
    returns: list[float] = dataclasses.field(default_factory=list)
    streams: int = 0  # experience streams open on this rank's server (its last status)


class GroupIntake:
    """A rank's intake. What it takes is counted in `Pending` and combined with the other ranks'
    at each update, in rank order (the same counters and statistics on every rank). An update is
    due when the group as a whole holds a batch (RankGroup.add_steps counts every rank's intake)
    and every rank has committed to it (RankGroup.commit: the wait never blocks; PeerLost if a
    peer left or went silent). A fragment taken once the group's batch was full is the next
    update's, as with one learner, whose batch ends with the fragment that fills it."""

    def __init__(self, learner: PPOLearner, group: RankGroup) -> None:
        self.learner, self.group = learner, group
        self.pending = self._new_pending(streams=0)
        self.batch: list[Entry] = []
        self.steps = 0  # env steps in `batch`
        self.carry: list[Entry] = []  # taken once the group's batch was full: the next update's
        self.round = 0  # updates this group did since it formed: the commitment's key
        self.holding = False  # committed to the next update, waiting for the others
        self.rank_env_steps = [0] * group.size  # env steps each rank took in, since it formed
        self.rank_streams = [0] * group.size  # as of the last update
        self.pods = Pods.from_environ().pods  # the learner pods the ranks spread over

    def _new_pending(self, streams: int) -> Pending:
        dim = (obs_stats_dim(self.learner.spaces),)
        return Pending(obs=RunningMeanStd(dim), ret=RunningMeanStd((1,)), streams=streams)

    def take(self, t: dict[str, np.ndarray], entry: Entry | None) -> None:
        """Count fragment `t`; keep `entry` for an update (None: stale, dropped)."""
        p, steps = self.pending, t["rewards"].size
        p.env_steps += steps
        p.episodes += len(t["episode_returns"])
        p.returns.extend(t["episode_returns"].tolist())
        # Stale or not, the fragment saw real states: the statistics take them either way.
        p.obs.merge(RunningMeanStd.moments_from_arrays(t, "obs"))
        p.ret.merge(RunningMeanStd.moments_from_arrays(t, "ret"))
        if entry is None:
            p.dropped_fragments += 1
        elif self.group.add_steps(self.round, steps) - steps >= self.learner.cfg.steps_per_update:
            # The group's batch was full before this fragment came: it is the next update's.
            self.carry.append(entry)
            self.group.add_steps(self.round + 1, steps)
        else:
            self.batch.append(entry)
            self.steps += steps

    def reject(self, reason: str) -> None:
        """Count a fragment rejected whole (its steps do not count)."""
        self.pending.rejected[reason] = self.pending.rejected.get(reason, 0) + 1

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
        mine, self.pending = self.pending, self._new_pending(self.pending.streams)
        everyone = self.group.gather(mine)
        for rank, p in enumerate(everyone):
            c.env_steps += p.env_steps
            c.episodes += p.episodes
            c.dropped_fragments += p.dropped_fragments
            for reason, n in p.rejected.items():
                c.rejected[reason] = c.rejected.get(reason, 0) + n
            learner.train_returns.extend(p.returns)
            learner.obs_rms.merge(p.obs.moments)
            learner.ret_rms.merge(p.ret.moments)
            self.rank_env_steps[rank] += p.env_steps
            self.rank_streams[rank] = p.streams
        if any(p.env_steps for p in everyone):
            learner._note_steps()

    def status(self, connected_actors: int) -> dict[str, Any]:
        """The group's fields: its streams (this rank's now, the others' as of the last update),
        what each rank took in, and (since this rank started) its time in collectives."""
        self.pending.streams = connected_actors  # the others hear it at the next update
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


def run_learner(cfg: PPOConfig, ctx: RunContext) -> int:
    """Serve experience and parameters until `total_steps` env steps are trained on and the final
    version is evaluated; exit 0. Resumes from the last checkpoint in `ctx.exp_dir`."""
    cfg.validate()
    join = datetime.timedelta(seconds=cfg.rank_join_seconds)
    if ctx.learners > 1 and rank_from_environ() is None:
        return launch_ranks(ctx.learners, join)  # this process starts and watches the ranks
    torch.set_num_threads(cfg.learner_threads)
    spaces = spaces_for(ctx.env).keep(cfg.obs_keys)
    group = group_from_environ(ctx.learners, join)
    learner = PPOLearner(cfg, spaces, ctx.total_steps, seed=ctx.seed, exp_dir=ctx.exp_dir, group=group)
    loop = ServingLoop(
        learner, ctx, take=learner.add_fragment,  # ignores fragments once the run is done
        experience_schema=experience_schema(spaces), credits_per_stream=cfg.credits_per_worker,
        agents=initial_agents(ctx), group=group,
    )  # fmt: skip
    try:
        return loop.run(
            ctx, final_eval_timeout=cfg.final_eval_timeout, eval_episodes=cfg.eval_episodes,
            policy_for=lambda params: eval_policy(cfg, spaces, params, ctx.seed), obs_keys=cfg.obs_keys,
        )  # fmt: skip
    except CollectiveFailed as exc:  # said as what it is (not a bug's trace), for its agent to tell
        log.error("%s", exc)
        return EXIT_COLLECTIVE_FAILED

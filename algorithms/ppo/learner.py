"""PPO learner core: fragments in, clipped PPO updates, parameters out.

`PPOLearner` has no networking, so tests and the serial harness drive it directly:
add_fragment() until ready(), update(), params(). `run_learner` serves it over the protocol.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from surreal.algorithms.common.checkpoint import load_checkpoint
from surreal.algorithms.common.envs import EnvSpaces, spaces_for
from surreal.algorithms.common.normalization import RunningMeanStd
from surreal.algorithms.common.progress import LearnerProgress
from surreal.algorithms.common.ranks import (
    RankGroup,
    flat_grads,
    group_from_environ,
    launch_ranks,
    set_flat_grads,
)
from surreal.algorithms.common.run import RunContext, progress_extras, rank_from_environ
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


@dataclasses.dataclass
class Pending:
    """What one rank took in since its group last combined counters (every update): the group's
    counters and statistics change only then, the same way on every rank. A single learner applies
    each fragment's at once."""

    env_steps: int = 0
    episodes: int = 0
    dropped_fragments: int = 0
    rejected: dict[str, int] = dataclasses.field(default_factory=dict)
    returns: list[float] = dataclasses.field(default_factory=list)
    obs: RunningMeanStd | None = None
    ret: RunningMeanStd | None = None
    streams: int = 0  # experience streams open on this rank's server (its last status)


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
        self._round = 0  # updates this group did since it formed: the commitment's key
        self._committed = False
        self.rank_env_steps = [0] * self.group.size  # env steps each rank took in, since it formed
        self.rank_streams = [0] * self.group.size
        self.update_seconds = 0.0  # in update(), since this process started (collectives included)
        self.device = resolve_device(cfg.device, self.group.rank)
        torch.manual_seed(seed)  # the initial weights are drawn on the CPU: the same on any device
        self.net = make_network(cfg, spaces).to(self.device)
        self._params = list(self.net.parameters())
        # foreach: one kernel per op over all parameter tensors instead of a Python loop.
        self.optimizer = torch.optim.Adam(self._params, lr=cfg.learning_rate, eps=cfg.adam_eps, fused=True)
        self.obs_rms = RunningMeanStd((obs_stats_dim(spaces),))
        self.ret_rms = RunningMeanStd((1,))
        self.counters = Counters()
        self._pending = self._new_pending()
        self.train_returns: deque[float] = deque(maxlen=100)
        self._init_progress()
        self._batch: list[tuple[dict[str, np.ndarray], int, str]] = []  # (tensors, policy lag, worker)
        self._batch_steps = 0
        # Of a rank: fragments taken once the group's batch was full (the next update's, as with
        # one learner, whose batch ends with the fragment that fills it).
        self._carry: list[tuple[dict[str, np.ndarray], int, str]] = []
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
        return self._committed

    def ready(self) -> bool:
        """A batch is due: enough steps buffered, or the run is done and some are left. Of a rank:
        the group's ranks together hold a batch and every rank has committed to the update (the
        wait never blocks; PeerLost if a peer left or went silent)."""
        if self.group.size == 1:
            return self._batch_steps >= self.cfg.steps_per_update or (self.done and self._batch_steps > 0)
        if self.done:  # the group ends together, after the update that reached total_steps
            return False
        self.group.keep_alive()
        if not self._committed:
            if self.group.group_steps(self._round) < self.cfg.steps_per_update:
                return False
            self.group.commit(self._round)
            self._committed = True
        return self.group.all_committed(self._round)

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
        """Account for a fragment; keep it for the next update unless stale. True if kept."""
        p = self._pending
        if self.done:
            return False
        t, rejection = open_fragment(fragment.tensors, self.spaces, self.cfg)  # image stacks rebuilt
        if t is None:
            assert rejection is not None
            self._reject(fragment.worker_id, *rejection)
            return False
        steps = t["rewards"].size
        p.env_steps += steps
        p.episodes += len(t["episode_returns"])
        p.returns.extend(t["episode_returns"].tolist())
        # Stale or not, the fragment saw real states: the statistics take them either way.
        assert p.obs is not None and p.ret is not None
        p.obs.merge(RunningMeanStd.moments_from_arrays(t, "obs"))
        p.ret.merge(RunningMeanStd.moments_from_arrays(t, "ret"))
        lag = self.counters.version - fragment.policy_version
        kept = 0 <= lag <= self.cfg.max_policy_lag  # < 0: a version this learner never had
        entry = (t, lag, fragment.worker_id)
        if not kept:
            p.dropped_fragments += 1
        elif (
            self.group.size > 1
            and self.group.add_steps(self._round, steps) - steps >= self.cfg.steps_per_update
        ):
            # The group's batch was full before this fragment came: it is the next update's.
            self._carry.append(entry)
            self.group.add_steps(self._round + 1, steps)
        else:
            self._batch.append(entry)
            self._batch_steps += steps
        if self.group.size == 1:
            self._apply_pending()
        return kept

    def _reject(self, worker_id: str, reason: str, detail: str) -> None:
        rejected = self._pending.rejected
        rejected[reason] = rejected.get(reason, 0) + 1
        self._rejections.note(worker_id, reason, detail)
        if self.group.size == 1:
            self._apply_pending()

    def _new_pending(self) -> Pending:
        dim = (obs_stats_dim(self.spaces),)
        return Pending(obs=RunningMeanStd(dim), ret=RunningMeanStd((1,)), streams=self._pending.streams
                       if hasattr(self, "_pending") else 0)  # fmt: skip

    def _apply_pending(self) -> None:
        """Every rank's Pending into the counters and statistics, in rank order (the same result on
        every rank); a single learner's at once."""
        mine, self._pending = self._pending, self._new_pending()
        everyone = self.group.gather(mine) if self.group.size > 1 else [mine]
        c = self.counters
        for rank, p in enumerate(everyone):
            c.env_steps += p.env_steps
            c.episodes += p.episodes
            c.dropped_fragments += p.dropped_fragments
            for reason, n in p.rejected.items():
                c.rejected[reason] = c.rejected.get(reason, 0) + n
            self.train_returns.extend(p.returns)
            assert p.obs is not None and p.ret is not None
            self.obs_rms.merge(p.obs.moments)
            self.ret_rms.merge(p.ret.moments)
            self.rank_env_steps[rank] += p.env_steps
            self.rank_streams[rank] = p.streams
        if any(p.env_steps for p in everyone):
            self._note_steps()

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
        batch, self._batch, self._carry = self._batch, self._carry, []
        self._batch_steps = sum(t["rewards"].size for t, _, _ in self._batch)
        if self.group.size > 1:
            self._committed = False
            self._round += 1
            self._apply_pending()  # the group's counters and statistics, before GAE uses them
        data, lags = self._prepare(batch)
        rows = len(data["obs"]) if data is not None else 0
        lag_sum, lag_count = float(sum(lags)), len(lags)
        if self.group.size > 1:
            totals = torch.tensor([rows, lag_sum, lag_count], dtype=torch.float64)
            summed = self.group.all_sum(totals).tolist()
            rows, lag_sum, lag_count = int(summed[0]), summed[1], int(summed[2])
        if rows == 0:
            return {}
        frac = 1.0 - (c.env_steps - rows) / self.total_steps
        lr = cfg.learning_rate * min(max(frac, 0.0), 1.0) if cfg.anneal_lr else cfg.learning_rate
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        stats = self._optimize(data, rows)
        if stats is None:
            c.skipped_updates += 1
            self._skips.note("learner", "non_finite_loss", "a non-finite loss or gradient; the "
                             "update was skipped and the weights kept")  # fmt: skip
            return {}
        c.updates += 1
        c.version += 1
        stats.update(
            learning_rate=lr,
            batch_steps=float(rows),
            policy_lag=lag_sum / lag_count,
        )
        if data is not None:  # of this rank's share
            stats["explained_variance"] = _explained_variance(data["values"], data["returns"])
        self._log_update(stats)
        if self.checkpoint_due():
            self.save()
        return stats

    def _prepare(
        self, batch: list[tuple[dict[str, np.ndarray], int, str]]
    ) -> tuple[dict[str, torch.Tensor] | None, list[int]]:
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
        """Clipped PPO epochs over shuffled minibatches of the group's `rows` rows (this rank's
        `data`, None if it has none). Stats stay tensors until the end. None if a loss or gradient
        was not finite: the weights and optimizer state are then as before (on every rank)."""
        cfg, net, ranked = self.cfg, self.net, self.group.size > 1
        keys = ("obs", "actions", "logprobs", "advantages", "returns", "values")
        size = len(data["obs"]) if data is not None else 0
        # Every rank takes the same number of gradient steps: the group's batch decides it.
        n_minibatches = max(1, round(rows / cfg.minibatch_size))
        rows_stats: list[torch.Tensor] = []
        saved = self._snapshot()
        finite = torch.ones((), dtype=torch.bool, device="cpu" if ranked else self.device)
        for _ in range(cfg.epochs):
            epoch_start = len(rows_stats)
            # One gather per tensor per epoch; the minibatches are then contiguous views.
            perm = torch.randperm(size, device=self.device)
            if data is None:
                shuffled: list[Any] = [[None] * n_minibatches] * len(keys)
            elif ranked:  # exactly n_minibatches pieces, some perhaps empty
                shuffled = [data[k][perm].tensor_split(n_minibatches) for k in keys]
            else:
                shuffled = [data[k][perm].chunk(n_minibatches) for k in keys]
            # Of ranks: every minibatch's advantage mean and std over the group, in one collective.
            adv_stats = self._group_adv_stats(shuffled[keys.index("advantages")]) if ranked else None
            for i, (obs, actions, old_logp, adv, returns, old_values) in enumerate(
                zip(*shuffled, strict=True)
            ):
                if ranked:
                    assert adv_stats is not None
                    mean, std, count = adv_stats[i]
                    if cfg.norm_adv and adv is not None and len(adv) and count > 1:
                        adv = (adv - mean) / (std + 1e-8)
                    row, ok = self._ranked_step(obs, actions, old_logp, adv, returns, old_values)
                    finite &= ok
                    rows_stats.append(row)
                    continue
                new_logp, entropy, new_values = net.evaluate(obs, actions)
                if cfg.norm_adv and len(adv) > 1:
                    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                loss, stats = ppo_loss(
                    new_logp, old_logp, adv, new_values, old_values, returns, entropy,
                    cfg.clip_coef, cfg.clip_vloss, cfg.ent_coef, cfg.vf_coef,
                )  # fmt: skip
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                norm = torch.nn.utils.clip_grad_norm_(self._params, cfg.max_grad_norm, foreach=True)
                finite &= torch.isfinite(loss) & torch.isfinite(norm)
                self.optimizer.step()
                rows_stats.append(torch.stack([stats[k] for k in LOSS_STATS]))
            if ranked:  # the epoch's stats as the group's means, and whether any rank went non-finite
                epoch = torch.stack(rows_stats[epoch_start:]).to("cpu", torch.float64)
                bad = (~finite).double().reshape(1).cpu()
                summed = self.group.all_sum(torch.cat([epoch.reshape(-1), bad]))
                epoch = summed[:-1].reshape(epoch.shape)
                rows_stats[epoch_start:] = list(epoch[:, :-1] / epoch[:, -1:].clamp(min=1.0))
                finite = torch.tensor(bool(summed[-1] == 0))
            # One host read per epoch. After a non-finite step the rest of the epoch computes NaN;
            # all of it is undone.
            if not bool(finite):
                self._rollback(saved)
                return None
            if cfg.target_kl is not None:  # one host read per epoch, not per minibatch
                kl = torch.stack(rows_stats[epoch_start:])[:, LOSS_STATS.index("approx_kl")].mean()
                if kl.item() > cfg.target_kl:
                    break
        means = torch.stack(rows_stats).mean(0).tolist()
        return {**dict(zip(LOSS_STATS, means, strict=True)), "grad_steps": float(len(rows_stats))}

    def _ranked_step(self, obs: torch.Tensor | None, actions: torch.Tensor | None,
                     old_logp: torch.Tensor | None, adv: torch.Tensor | None,
                     returns: torch.Tensor | None, old_values: torch.Tensor | None,
                     ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """One gradient step of the group on this rank's piece of the minibatch (None or empty:
        none; advantages already normalized over the group's minibatch). The gradient is the mean
        over the group's minibatch: each rank's mean gradient weighted by its rows, summed, divided
        by the rows of all. Returns (the loss stats times this rank's rows, then its rows; whether
        its loss and the gradient were finite)."""
        cfg, group = self.cfg, self.group
        n = 0 if obs is None else len(obs)
        self.optimizer.zero_grad(set_to_none=True)
        if n:
            assert obs is not None and actions is not None and old_logp is not None
            assert adv is not None and returns is not None and old_values is not None
            new_logp, entropy, new_values = self.net.evaluate(obs, actions)
            loss, stats = ppo_loss(
                new_logp, old_logp, adv, new_values, old_values, returns, entropy,
                cfg.clip_coef, cfg.clip_vloss, cfg.ent_coef, cfg.vf_coef,
            )  # fmt: skip
            loss.backward()
            row = torch.stack([stats[k] for k in LOSS_STATS]).double() * n
            ok = torch.isfinite(loss)
        else:
            row = torch.zeros(len(LOSS_STATS), dtype=torch.float64, device=self.device)
            ok = torch.ones((), dtype=torch.bool, device=self.device)
        flat = flat_grads(self._params).cpu().double() * n
        total_rows = group.all_sum(torch.cat([flat, torch.tensor([float(n)], dtype=torch.float64)]))
        grads = (total_rows[:-1] / total_rows[-1]).to(self.device, self._params[0].dtype)
        set_flat_grads(self._params, grads)
        norm = torch.nn.utils.clip_grad_norm_(self._params, cfg.max_grad_norm, foreach=True)
        self.optimizer.step()
        weighted = torch.cat([row.cpu(), torch.tensor([float(n)], dtype=torch.float64)])
        return weighted, ok & torch.isfinite(norm).cpu()

    def _group_adv_stats(self, pieces: Sequence[torch.Tensor | None]) -> list[list[float]]:
        """(mean, unbiased std, count) of each minibatch's advantages over the group, from this
        rank's `pieces` of them: their counts, sums and sums of squares summed in one collective
        per epoch (float64) instead of two per minibatch beside the gradient's."""
        local = torch.zeros((len(pieces), 3), dtype=torch.float64)
        for i, adv in enumerate(pieces):
            if adv is not None and len(adv):
                a = adv.detach().double().cpu()
                local[i] = torch.stack(
                    [torch.tensor(float(len(a)), dtype=torch.float64), a.sum(), (a * a).sum()]
                )
        n, total, sq = self.group.all_sum(local).unbind(1)
        mean = total / n.clamp(min=1.0)
        var = ((sq - n * mean * mean) / (n - 1).clamp(min=1.0)).clamp(min=0.0)
        return torch.stack([mean, var.sqrt(), n], 1).tolist()  # type: ignore[no-any-return]

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
        """The contract's status dict (see status.json)."""
        c = self.counters
        if self.group.size == 1:
            return {
                **self.contract_status(c.dropped_fragments, connected_actors),
                "rejected_fragments": dict(c.rejected),
                "skipped_updates": c.skipped_updates,
                "update_seconds": self.update_seconds,  # in updates since this process started
            }
        # Of a group: the experiment's counters (as of the last update), this rank's streams now
        # and the others' as of the last update, and what each rank took in.
        self._pending.streams = connected_actors
        streams = list(self.rank_streams)
        streams[self.group.rank] = connected_actors
        return {
            **self.contract_status(c.dropped_fragments, sum(streams)),
            "rejected_fragments": dict(c.rejected),
            "skipped_updates": c.skipped_updates,
            "group_restarts": self.group.restarts,
            # since this rank started: in updates, and in their collectives (benchmarks read them)
            "update_seconds": self.update_seconds,
            "collective_seconds": self.group.collective_seconds,
            "learners": [{"rank": r, "env_steps": s, "connected_actors": n}
                         for r, (s, n) in enumerate(zip(self.rank_env_steps, streams, strict=True))],
        }  # fmt: skip

    def _log_update(self, stats: dict[str, float]) -> None:
        if self._tb is None:
            return
        step = self.counters.env_steps
        self._tb.add("train", stats, step)
        c = self.counters
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
        if self.group.size > 1:  # what each rank took in
            per_rank = {f"rank{r}_env_steps": n for r, n in enumerate(self.rank_env_steps)}
            self._tb.add("learners", per_rank, step)

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


def _explained_variance(values: torch.Tensor, returns: torch.Tensor) -> float:
    var = returns.var()
    return float(1.0 - (returns - values).var() / var) if var > 0 else float("nan")


def run_learner(cfg: PPOConfig, ctx: RunContext) -> int:
    """Serve experience and parameters until `total_steps` env steps are trained on and the final
    version is evaluated; exit 0. Resumes from the last checkpoint in `ctx.exp_dir`."""
    cfg.validate()
    if ctx.learners > 1 and rank_from_environ() is None:
        return launch_ranks(ctx.learners)  # this process starts and watches the ranks
    torch.set_num_threads(cfg.learner_threads)
    spaces = spaces_for(ctx.env)
    group = group_from_environ(ctx.learners)
    learner = PPOLearner(cfg, spaces, ctx.total_steps, seed=ctx.seed, exp_dir=ctx.exp_dir, group=group)
    loop = ServingLoop(
        learner, ctx, take=learner.add_fragment,  # ignores fragments once the run is done
        experience_schema=experience_schema(spaces), credits_per_stream=cfg.credits_per_worker,
        agents=initial_agents(ctx), group=group,
    )  # fmt: skip
    return loop.run(
        ctx, final_eval_timeout=cfg.final_eval_timeout, eval_episodes=cfg.eval_episodes,
        policy_for=lambda params: eval_policy(cfg, spaces, params, ctx.seed),
    )  # fmt: skip

"""The batch an on-policy algorithm's update takes (api.OnPolicy.update)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from surreal.algorithms.api import Reduce


@dataclasses.dataclass(frozen=True)
class Batch:
    """The experience of one update, one row per env step, on the learner's device: this rank's
    share of the group's batch (all of it, for one learner). Advantages and returns are GAE's
    (gamma, gae_lambda), values and log-probabilities those of the policy that acted.

    A loss is a mean over the group's rows: `batch.mean(per_row_loss)` (this rank's rows summed,
    divided by the group's), so that summing the ranks' gradients (`reduce.sum_grads`) gives the
    gradient of the group's mean, and a rank without rows adds nothing."""

    obs: torch.Tensor  # [R, ...] as the network takes them (normalized vectors, uint8 images)
    actions: torch.Tensor  # [R] (discrete) or [R, A]
    logprobs: torch.Tensor  # [R] of the actions, under the policy that acted
    values: torch.Tensor  # [R] of the observations, under the learner's network before the update
    advantages: torch.Tensor  # [R]
    returns: torch.Tensor  # [R] advantages + values
    group_rows: int  # the rows of the group's batch (of one learner: len(obs))

    def mean(self, per_row: torch.Tensor) -> torch.Tensor:
        """This rank's part of the group's mean of `per_row` [R]."""
        return per_row.sum() / max(self.group_rows, 1)

    def normalized(self, x: torch.Tensor, reduce: Reduce) -> torch.Tensor:
        """`x` [R] less the group's mean, over its std (unbiased, + 1e-8): one reduction. A group
        of one row is left as it is."""
        wide = x.double()
        sums = reduce.sum(torch.stack([wide.new_tensor(float(len(x))), wide.sum(), wide.square().sum()]))
        count, total, squares = sums.unbind()
        mean = total / count.clamp(min=1.0)
        std = ((squares - count * mean * mean) / (count - 1).clamp(min=1.0)).clamp(min=0.0).sqrt()
        several = count > 1
        return (x - mean.where(several, 0.0).to(x.dtype)) / (std + 1e-8).where(several, 1.0).to(x.dtype)

    def epochs(self, epochs: int, n: int, reduce: Reduce) -> Iterator[list[Batch]]:
        """`epochs` passes over the batch, each shuffled anew and cut into `n` minibatches of the
        group: each rank holds its own piece of each (a piece may be empty) and knows the group's
        rows in it (the same every epoch: reduced once)."""
        rows = len(self.obs)
        sizes = [rows // n + (i < rows % n) for i in range(n)]
        group = reduce.sum(torch.tensor(sizes, dtype=torch.float64)).tolist() if n > 1 else [self.group_rows]
        for _ in range(epochs):
            perm = torch.randperm(rows, device=self.obs.device)
            pieces = {f.name: getattr(self, f.name)[perm].tensor_split(n) for f in TENSORS}
            yield [
                Batch(**{k: piece[i] for k, piece in pieces.items()}, group_rows=int(group[i]))
                for i in range(n)
            ]


TENSORS = [f for f in dataclasses.fields(Batch) if f.name != "group_rows"]

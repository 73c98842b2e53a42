"""The actor-critics the learner trains (on images: cnn.py). Actors and the evaluator sample the
policy half in numpy (policy.py); here only log-probabilities, entropies and values are needed,
written out by hand instead of torch.distributions: short formulas, no per-call validation."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

from surreal.runtime.envs.act_leaves import ActionLayout
from surreal.runtime.envs.make import EnvSpaces
from surreal.runtime.onpolicy.config import OnPolicyConfig

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


# torch's CPU tanh kernel is slow: on [1024, 64] it takes ~230 us against ~75 us for sigmoid, more
# than the matmul beside it. tanh(x) = 2 sigmoid(2x) - 1 (exact up to ~2e-7 absolute) with the
# backward written from the output (aten::tanh_backward, 1 - y^2) halves a learner minibatch's
# activation cost. Small batches keep torch.tanh: fewer kernels.
_FAST_TANH_MIN_NUMEL = 16_384


class _SigmoidTanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        y = torch.sigmoid(x * 2.0).mul_(2.0).sub_(1.0)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)


class Tanh(nn.Module):
    """nn.Tanh, computed through sigmoid for large inputs (see _SigmoidTanh)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.numel() < _FAST_TANH_MIN_NUMEL or x.device.type != "cpu":  # GPUs' tanh is fast
            return torch.tanh(x)
        return _SigmoidTanh.apply(x)


class MLP(nn.Sequential):
    """nn.Sequential of Linear and activation layers (same state_dict keys), whose forward calls
    the functional ops directly (a module call costs ~2 us of Python). load_state_dict copies into
    the existing parameters, so the references held here stay current."""

    def __init__(self, *layers: nn.Module) -> None:
        super().__init__(*layers)
        self._plan: list[tuple[torch.Tensor, torch.Tensor] | Callable[[torch.Tensor], torch.Tensor]] = [
            (m.weight, m.bias) if isinstance(m, nn.Linear) else m.forward for m in layers
        ]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for step in self._plan:
            x = F.linear(x, *step) if isinstance(step, tuple) else step(x)
        return x


def mlp(
    in_dim: int,
    hidden: tuple[int, ...],
    out_dim: int,
    activation: str,
    out_gain: float,
    ortho: bool,
) -> MLP:
    act = {"tanh": Tanh, "relu": nn.ReLU}[activation]
    layers: list[nn.Module] = []
    sizes = (in_dim, *hidden)
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        layers += [init_layer(nn.Linear(a, b), math.sqrt(2), ortho), act()]
    layers.append(init_layer(nn.Linear(sizes[-1], out_dim), out_gain, ortho))
    return MLP(*layers)


def init_layer(layer: nn.Conv2d | nn.Linear, gain: float, ortho: bool) -> nn.Module:
    """`layer` with orthogonal weights of `gain` and zero biases (`ortho`), else as torch made it."""
    if ortho:
        nn.init.orthogonal_(layer.weight, gain)
        if layer.bias is not None:
            nn.init.zeros_(layer.bias)
    return layer


def log_prob_entropy(
    out: torch.Tensor,
    actions: torch.Tensor,
    discrete: bool,
    log_std: torch.Tensor | None,
    layout: ActionLayout | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities of `actions` and entropies [B] of the policy head's output `out`: logits
    of a categorical, the means of a diagonal Gaussian with `log_std`, or, for actions of several
    leaves (`layout`), each categorical column's logits then the Gaussian means, summed over
    columns."""
    if layout is not None:
        return _leaves_log_prob_entropy(out, actions, layout, log_std)
    if discrete:
        logp_all = torch.log_softmax(out, dim=-1)
        logp = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp, entropy
    assert log_std is not None
    return _gaussian(out, actions, log_std)


def _gaussian(
    means: torch.Tensor, actions: torch.Tensor, log_std: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    z = (actions - means) * torch.exp(-log_std)
    logp = (-0.5 * z.square() - log_std - _HALF_LOG_2PI).sum(-1)
    entropy = (0.5 + _HALF_LOG_2PI + log_std).sum().expand(means.shape[0])
    return logp, entropy


@functools.cache
def _layout_tensors(layout: ActionLayout, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The layout's gather index and padding mask on `device` (made once per layout and device)."""
    return torch.as_tensor(layout.cat_index, device=device), torch.as_tensor(layout.pad, device=device)


def _leaves_log_prob_entropy(
    out: torch.Tensor, actions: torch.Tensor, layout: ActionLayout, log_std: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    k = len(layout.nvec)
    logp = out.new_zeros(out.shape[0])
    entropy = out.new_zeros(out.shape[0])
    if k:
        index, pad = _layout_tensors(layout, out.device)
        logits = out[:, index]  # [B, K, max n]
        if layout.padded:
            logits = logits.masked_fill(pad, float("-inf"))
        logp_all = torch.log_softmax(logits, dim=-1)
        chosen = actions[:, :k].long().unsqueeze(-1)
        logp = logp + logp_all.gather(-1, chosen).squeeze(-1).sum(-1)
        finite = logp_all.masked_fill(pad, 0.0) if layout.padded else logp_all  # 0 x -inf is NaN
        entropy = entropy - (logp_all.exp() * finite).sum((-1, -2))
    if layout.gaussian:
        assert log_std is not None
        g_logp, g_entropy = _gaussian(out[:, layout.logits :], actions[:, k:], log_std)
        logp, entropy = logp + g_logp, entropy + g_entropy
    return logp, entropy


def make_network(cfg: OnPolicyConfig, spaces: EnvSpaces) -> TrunkActorCritic:
    """What the learner trains: a CNN actor-critic on images, separate MLPs on vectors (and on the
    packed rows of observations of several leaves), the CNN and the MLPs on an image beside other
    leaves (cnn.MixedActorCritic)."""
    if spaces.has_image:
        from surreal.runtime.onpolicy.cnn import CNNActorCritic, MixedActorCritic

        if spaces.structured:
            return MixedActorCritic(
                spaces, cfg.hidden_sizes, cfg.activation, cfg.log_std_init, cfg.ortho_init
            )
        return CNNActorCritic(spaces, cfg.log_std_init, cfg.ortho_init)
    return ActorCritic(spaces, cfg.hidden_sizes, cfg.activation, cfg.log_std_init, cfg.ortho_init)


class TrunkActorCritic(nn.Module):
    """A policy head and a value head on features computed once per batch (`features`: the
    observations themselves in ActorCritic, a CNN's in cnn.py). The policy is categorical for
    Discrete actions, a diagonal Gaussian with a free log std for Box, a categorical per column and
    a Gaussian per column for actions of several leaves (act_leaves.py)."""

    discrete: bool
    layout: ActionLayout | None
    policy: nn.Module
    critic: nn.Module

    def set_actions(self, spaces: EnvSpaces, log_std_init: float) -> None:
        """What the policy head's output means (`discrete`, `layout`: log_prob_entropy's arguments),
        and its Gaussian columns' learned `log_std` (state_dict key `log_std`, which policy.py reads)."""
        self.discrete = spaces.discrete
        self.layout = spaces.action_layout if spaces.structured_actions else None
        if spaces.gaussian_dim:
            self.log_std = nn.Parameter(torch.full((spaces.gaussian_dim,), float(log_std_init)))

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def head(self, obs: torch.Tensor) -> torch.Tensor:
        """The policy head's output: logits, or Gaussian means."""
        return self.policy(self.features(obs))  # type: ignore[no-any-return]

    def evaluate(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-probabilities of `actions`, entropies and values [B] (what an update needs), through
        the trunk once."""
        x = self.features(obs)
        logp, entropy = log_prob_entropy(
            self.policy(x), actions, self.discrete, getattr(self, "log_std", None), self.layout
        )
        return logp, entropy, self.critic(x).squeeze(-1)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """State values [B]."""
        return self.critic(self.features(obs)).squeeze(-1)  # type: ignore[no-any-return]


class ActorCritic(TrunkActorCritic):
    """Separate policy and value MLPs on the observations. state_dict keys (`policy.<i>.weight`,
    `policy.<i>.bias`, `log_std`) are what policy.py reads."""

    def __init__(
        self,
        spaces: EnvSpaces,
        hidden_sizes: tuple[int, ...] = (64, 64),
        activation: str = "tanh",
        log_std_init: float = 0.0,
        ortho_init: bool = True,
    ) -> None:
        super().__init__()
        d, a = spaces.obs_dim, spaces.head_dim
        # The small policy head starts the policy near uniform / zero-mean (Andrychowicz et al.).
        self.policy = mlp(d, hidden_sizes, a, activation, 0.01, ortho_init)
        self.critic = mlp(d, hidden_sizes, 1, activation, 1.0, ortho_init)
        self.set_actions(spaces, log_std_init)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        return obs

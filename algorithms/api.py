"""The algorithm API: what an algorithm gives surreal, and what surreal gives every algorithm.

`Algorithm` is what the runtime asks of any algorithm: its config (a frozen dataclass) and presets,
its checks, the programs of its roles, and the policy in a checkpoint. `OnPolicy` is the family of
actor-critic algorithms whose actors sample from the policy network and send what they saw: an
algorithm of it writes only its config and its `update` (PPO: algorithms/ppo; A2C in one file:
examples/a2c.py, walked through in docs/algorithms/writing.md). `--algo MODULE:NAME` loads one
from a user's module (registry.py).

The runtime gives every algorithm, without code of its own: transport with credits and distrust of
what arrives (every fragment is checked before it counts), the serving loop, learner ranks (one
`Reduce` hook), one checkpoint envelope and version rule, preemption (SIGTERM loses no update),
reconnects, scale, progress and TensorBoard, evaluations, `surreal record` and `load_policy`.

Imports of torch and of the runtime's modules are deferred: validating a spec or rendering
Kubernetes objects does not pay for them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import reprlib
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from surreal.runtime import bounds
from surreal.runtime.config import HUGE, TINY
from surreal.runtime.envs.ref import EnvRef, ResolvedEnv, as_env_ref, ours, raised
from surreal.runtime.offpolicy.config import OffPolicyConfig
from surreal.runtime.onpolicy.config import OnPolicyConfig
from surreal.runtime.run import RunContext

if TYPE_CHECKING:
    import torch

    from surreal.runtime.envs.make import EnvSpaces
    from surreal.runtime.offpolicy.encoder import Encoder
    from surreal.runtime.offpolicy.networks import TwinQ, mlp
    from surreal.runtime.offpolicy.policy import LOG_STD_MAX, LOG_STD_MIN, Features, TorchActor
    from surreal.runtime.onpolicy.batch import Batch
    from surreal.runtime.onpolicy.networks import ActorCritic

__all__ = [
    "ActorCritic",
    "Algorithm",
    "Batch",
    "Encoder",
    "EnvRef",
    "EnvSpaces",
    "Features",
    "HUGE",
    "LOG_STD_MAX",
    "LOG_STD_MIN",
    "Network",
    "OffPolicy",
    "OffPolicyConfig",
    "OnPolicy",
    "OnPolicyConfig",
    "Reduce",
    "ResolvedEnv",
    "RoleMain",
    "TINY",
    "TorchActor",
    "TwinQ",
    "as_env_ref",
    "mlp",
    "resolve_env",
]

RoleMain = Callable[[Any, RunContext], int]


def _module(name: str) -> Any:
    return importlib.import_module(f"surreal.runtime.{name}")


# What an algorithm may build on, imported when asked for (some with torch): the on-policy batch and
# actor-critic, the off-policy networks' observation encoder, and the numpy encoder and MLP trunk of
# a policy.
_LAZY = {"ActorCritic": "onpolicy.networks", "Batch": "onpolicy.batch", "Encoder": "offpolicy.encoder",
         "Features": "offpolicy.policy", "LOG_STD_MIN": "offpolicy.policy",
         "LOG_STD_MAX": "offpolicy.policy", "mlp": "offpolicy.networks", "TwinQ": "offpolicy.networks",
         "TorchActor": "offpolicy.policy"}  # fmt: skip


def resolve_env(env: EnvRef | str) -> ResolvedEnv:
    """What resolving `env` finds (one throwaway instance built): its spaces, Atari or images."""
    return _module("envs.make").resolve_env(env)  # type: ignore[no-any-return]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(_module(_LAZY[name]), name)
    raise AttributeError(name)


class Algorithm:
    """What the runtime asks of an algorithm. The defaults suit any algorithm; a family
    (`OnPolicy`) or an algorithm of its own (ES) overrides what differs."""

    name: ClassVar[str]  # how status, logs and errors name it
    roles: ClassVar[tuple[str, ...]] = ("learner", "actor", "evaluator")
    # What a subclass must write (check_algorithm): an algorithm of its own gives its roles' programs.
    hooks: ClassVar[tuple[str, ...]] = ("preset", "role_main", "checkpoint_policy")
    # Why it trains with one learner, in the line that refuses `--learners N` ("": it trains with
    # learner ranks, spec `learners`).
    one_learner: ClassVar[str] = ""
    default_env: ClassVar[str] = "CartPole-v1"  # what `create` without --env trains on
    steps: ClassVar[int] = 1_000_000  # env steps a run trains for when none are given

    def resolve_env(self, env: EnvRef) -> ResolvedEnv:
        """Resolve `env` (builds one throwaway instance, with its kwargs) and check this algorithm
        can run on it: what `surreal create` writes into the spec file. Raises ValueError naming
        the problem."""
        resolved: ResolvedEnv = _module("envs.make").resolve_env(env)
        self.check_env(env, resolved)
        return resolved

    def preset(self, env: EnvRef | str, agents: int, resolved: ResolvedEnv | None = None) -> Any:
        """The configuration (a frozen dataclass) for `env` and `agents` logical agents; `resolved`
        (resolve_env's) spares resolving `env` again."""
        raise NotImplementedError

    def default_steps(self, env: EnvRef | str, agents: int, resolved: ResolvedEnv | None = None) -> int:
        """Env steps a run of `agents` agents on `env` trains for when none are given."""
        return self.steps

    def check_env(self, env: EnvRef | str, resolved: ResolvedEnv | None = None) -> None:
        """Raise ValueError when this algorithm cannot run on `env`'s spaces (`resolved`, or those
        of one instance built here, which raises when `env` cannot be resolved or made)."""
        if resolved is None:
            _module("envs.make").resolve_env(env)

    def check_config(self, config: Any, env: EnvRef | str, resolved: ResolvedEnv | None = None) -> None:
        """Raise ValueError when `config` cannot train on `env` (e.g. settings an image env refuses)."""

    def check_local(self, config: Any) -> None:
        """Raise ValueError when `config` cannot run on this machine (e.g. a GPU it does not have)."""
        device = getattr(config, "device", "cpu")
        if device not in ("auto", "cpu"):
            _module("device").resolve_device(device)

    def fragment_bytes(self, config: Any, resolved: ResolvedEnv, agents_in_worker: int) -> int:
        """The bytes of one message of experience from a worker of `agents_in_worker` agents (0
        for an algorithm whose workers send only small results)."""
        return 0

    def first_update(self, config: Any) -> tuple[int, str]:
        """The fewest env steps a run can apply an update in, and the setting that says so (create
        refuses a run of fewer: it could not train); (0, "") for no such bound."""
        return 0, ""

    def worker_envs(self, config: Any, agents_in_worker: int) -> int:
        """The environments a worker of `agents_in_worker` agents steps (one each by default)."""
        return agents_in_worker

    def calibrate(self, config: Any, env: EnvRef, agents_in_worker: int, budget: float = 1.0) -> Any:
        """What one actor process of `agents_in_worker` agents makes and one learner consumes, in env
        steps per second, measured here with this algorithm's code (runtime/calibrate.Rates; each
        part timed for about `budget` seconds); None for an algorithm that cannot say."""
        return None

    def checkpoint_policy(self, config: Any, resolved: ResolvedEnv, state: Any, seed: int = 0) -> Any:
        """The policy in a checkpoint's `state` (load_checkpoint's): raw observations [N, ...] and
        `deterministic` -> actions [N, ...] (runtime/evaluator.TrainedAct)."""
        raise NotImplementedError

    def role_main(self, role: str) -> RoleMain:
        """The program of `role`: main(config, ctx) -> exit code."""
        raise NotImplementedError

    def check_role(self, role: str) -> None:
        if role not in self.roles:
            raise ValueError(f"algorithm {self.name!r} has no role {role!r} (roles: {self.roles})")


class Network(Protocol):
    """An on-policy actor-critic for the environment's spaces: the runtime's (ActorCritic,
    runtime/onpolicy/networks.py), or an algorithm's own from `OnPolicy.make` (a torch module)."""

    def evaluate(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per row: the log-probability of the action, the policy's entropy, the value."""
        ...

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """Per row: the value (the learner's GAE)."""
        ...

    def head(self, obs: torch.Tensor) -> torch.Tensor:
        """Per row: the logits, or the Gaussian means beside the module's `log_std` parameter, that
        actors sample from (what `evaluate`'s log-probabilities must be of)."""
        ...

    def parameters(self) -> Iterator[torch.nn.Parameter]: ...


class Reduce(Protocol):
    """How learner ranks enter an update: sums over the group. For one learner each is the
    identity and costs nothing, so an update written against it takes no branch for ranks."""

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor` summed over the ranks (the same bytes on every rank)."""
        ...

    def sum_grads(self, params: Sequence[torch.Tensor]) -> None:
        """Each gradient of `params` summed over the ranks, in place."""
        ...


class OnPolicy(Algorithm):
    """An actor-critic algorithm on the on-policy runtime (runtime/onpolicy): actors step their
    environments with the policy network's samples and send fragments (observations, actions,
    their log-probabilities, rewards, episode ends); the learner values them, computes GAE, and
    calls `update` on each batch of `steps_per_update` env steps. The network is the runtime's
    (separate policy and value MLPs, a CNN for images, one encoder per leaf of Dict observations;
    `hidden_sizes`, `activation`), with `net.evaluate(obs, actions) -> (log_prob, entropy, value)`.

    Subclass it with `name`, `Config` (a frozen dataclass deriving from OnPolicyConfig) and
    `update`; override `make` for a network of your own (`ActorCritic` is the base to derive it
    from: actors then run it in torch), `optimizer` for another than Adam, `preset` for tuned
    settings per environment."""

    Config: ClassVar[type[OnPolicyConfig]] = OnPolicyConfig
    hooks = ("update",)

    def update(self, net: Network, optimizer: torch.optim.Optimizer, batch: Batch,
               cfg: Any, reduce: Reduce) -> dict[str, Any]:  # fmt: skip
        """One update of `net` on `batch`; its statistics (numbers or 0-d tensors, the group's:
        the same on every rank). The runtime keeps the weights and optimizer state as they were,
        and counts the update skipped, when a statistic or a weight comes out non-finite."""
        raise NotImplementedError

    def make(self, cfg: Any, spaces: EnvSpaces) -> Network:
        """The actor-critic the learner trains for `spaces` (a torch module; its state_dict is what
        actors receive and the checkpoint holds). By default the runtime's, which actors run in
        numpy; the policy of any other is its `head` in torch (`policy`)."""
        return _module("onpolicy.networks").make_network(cfg, spaces)  # type: ignore[no-any-return]

    def policy(self, cfg: Any, spaces: EnvSpaces, weights: Mapping[str, Any], rng: Any) -> Any:
        """What actors and the evaluator run from the published `weights` (numpy arrays by name):
        `act(obs_rows, deterministic) -> (actions, log_probs)` (runtime/onpolicy/policy.NumpyPolicy).
        The runtime's network in numpy; a network of `make`'s own through its `head` in torch."""
        policy = _module("onpolicy.policy").NumpyPolicy
        if type(self).make is OnPolicy.make:
            return policy(weights, spaces, cfg.activation, rng)
        head = _module("offpolicy.policy").TorchActor(self.make(cfg, spaces), weights, "head")
        return policy(weights, spaces, cfg.activation, rng, head=head)

    def optimizer(self, params: list[torch.nn.Parameter], cfg: Any) -> torch.optim.Optimizer:
        """The optimizer of the network's `params`, handed to `update` and checkpointed with its
        state; the runtime scales each group's starting lr as `anneal_lr` says. Adam by default."""
        import torch

        # fused: one kernel per op over all parameter tensors instead of a Python loop.
        return torch.optim.Adam(params, lr=cfg.learning_rate, eps=cfg.adam_eps, fused=True)

    def preset(self, env: EnvRef | str, agents: int, resolved: ResolvedEnv | None = None) -> Any:
        return self.Config()

    def check_config(self, config: Any, env: EnvRef | str, resolved: ResolvedEnv | None = None) -> None:
        _module("onpolicy.config").check_config(config, env, resolved=resolved)

    def fragment_bytes(self, config: Any, resolved: ResolvedEnv, agents_in_worker: int) -> int:
        return int(_module("onpolicy.fragment").fragment_bytes(config, resolved, agents_in_worker))

    def first_update(self, config: Any) -> tuple[int, str]:
        needed = int(config.steps_per_update)
        return needed, f"{config.section}.steps_per_update = {needed:,}"

    def worker_envs(self, config: Any, agents_in_worker: int) -> int:
        return agents_in_worker * int(config.envs_per_agent)

    def calibrate(self, config: Any, env: EnvRef, agents_in_worker: int, budget: float = 1.0) -> Any:
        return _module("calibrate").onpolicy(self, config, env, agents_in_worker, budget)

    def checkpoint_policy(self, config: Any, resolved: ResolvedEnv, state: Any, seed: int = 0) -> Any:
        spaces = _module("envs.make").spaces_of(resolved)
        return _module("onpolicy.evaluator").checkpoint_policy(self, config, spaces, state, seed)

    def role_main(self, role: str) -> RoleMain:
        self.check_role(role)
        return functools.partial(getattr(_module(f"onpolicy.{role}"), f"run_{role}"), self)


class OffPolicy(Algorithm):
    """An algorithm that learns from replay (runtime/offpolicy): actors step their environments
    with the algorithm's `policy` and insert transitions into `replay` shards (`--replay-shards`),
    whose rate limiters hold the rows trained per row inserted at `replay_ratio`; the learner
    samples `batch_size` rows at a time from the shards and calls `update` on each. Actions are
    `actions`' kind: "box", one Box of any bounds (float32 rows in [-1, 1], scaled to the bounds
    for the environment), or "discrete", one Discrete (int64 indices). Observations of every kind
    (runtime/offpolicy/obs.py: a Box, an image, Dict/Tuple leaves) reach networks as packed
    float32 rows through `Encoder` (a CNN for an image).

    Subclass it with `name`, `Config` (deriving from OffPolicyConfig), `make` (the networks and
    their optimizers as one module, whose state_dict is the checkpoint's: `actor`, the network
    whose weights actors receive, and `optimizers()`, by name; an algorithm's own state, such as
    a count of updates, is a buffer of it and survives a restart), `update`, and `policy` (what
    actors and the evaluator run from `actor`'s weights: SAC's squashed Gaussian by default).
    SAC: algorithms/sac; TD3: algorithms/td3; DQN: algorithms/dqn."""

    Config: ClassVar[type[OffPolicyConfig]] = OffPolicyConfig
    roles = ("learner", "actor", "replay", "evaluator")
    hooks = ("make", "update")
    actions: ClassVar[str] = "box"  # the kind of actions it takes: "box" or "discrete"
    # The off-policy runtime has no ranks: its update is the cap, and a GPU, not a second learner
    # sampling the same replay, is what raises it (docs/algorithms/sac.md).
    one_learner = (
        "one learner samples every replay shard: --gpu speeds its updates, --replay-shards its intake"
    )
    default_env = "Pendulum-v1"  # its actions must be continuous (check_env)

    def make(self, cfg: Any, spaces: EnvSpaces) -> torch.nn.Module:
        """The networks for `spaces` (envs/make.EnvSpaces): each takes packed observation rows
        [B, spaces.obs_dim] through its own `offpolicy.encoder.Encoder(spaces)` (out_dim features);
        actions have spaces.action_dim columns."""
        raise NotImplementedError

    def update(self, nets: Any, batch: dict[str, torch.Tensor], cfg: Any) -> dict[str, Any]:
        """One update of `nets` on `batch` (obs and next_obs as packed rows, actions: float32 rows
        in [-1, 1] or int64 indices, rewards, terminated: tensors of `batch_size` rows); its
        statistics (numbers or 0-d tensors)."""
        raise NotImplementedError

    def policy(self, cfg: Any, spaces: EnvSpaces, weights: Mapping[str, Any], rng: Any) -> Any:
        """What actors and the evaluator run, from the published weights of `make`'s `actor`
        (numpy arrays by name), in numpy: `act(obs_rows, deterministic, progress) -> actions`
        (runtime/offpolicy/policy.Policy). `Features` runs the built-in encoder and MLP trunk in
        numpy; `TorchActor` runs a network of your own in torch. By default SAC's squashed
        Gaussian on `trunk`, `mu` and `log_std` layers."""
        return _module("offpolicy.policy").SquashedGaussian(weights, cfg.activation, rng, spaces)

    # Presets, as data: settings by environment id, for every MuJoCo task, for observations with an
    # image, for Atari games (rl-baselines3-zoo's, each algorithm's page says which), and env steps.
    presets: ClassVar[dict[str, dict[str, Any]]] = {}
    mujoco: ClassVar[dict[str, Any]] = {}
    images: ClassVar[dict[str, Any]] = {}
    atari: ClassVar[dict[str, Any]] = {}
    steps_for: ClassVar[dict[str, int]] = {}

    def preset(self, env: EnvRef | str, agents: int, resolved: ResolvedEnv | None = None) -> Any:
        name = as_env_ref(env).name
        if name in self.presets:
            return self.Config(**self.presets[name])
        facts = resolved or self.resolve_env(as_env_ref(env))
        kinds = {
            "mujoco": facts.entry_point.startswith("gymnasium.envs.mujoco"),
            "atari": facts.atari,
            "images": facts.image_shape is not None
            or any(x.get("kind") == "image" for x in facts.obs_leaves),
        }
        return self.Config(
            **{k: v for kind, on in kinds.items() if on for k, v in getattr(self, kind).items()}
        )

    def default_steps(self, env: EnvRef | str, agents: int, resolved: ResolvedEnv | None = None) -> int:
        return self.steps_for.get(as_env_ref(env).name, self.steps)

    def check_env(self, env: EnvRef | str, resolved: ResolvedEnv | None = None) -> None:
        facts = resolved or _module("envs.make").resolve_env(env)
        sp = _module("envs.make").spaces_of(facts)
        kind = "a Discrete" if sp.discrete else "a Box" if sp.action_low is not None else "not one space"
        if self.actions == "discrete":
            if not sp.discrete:
                raise ValueError(f"{self.name} needs one Discrete of actions; {env}'s are {kind}")
            return
        if sp.discrete or sp.structured_actions or sp.action_low is None:
            raise ValueError(f"{self.name} needs one Box of continuous actions; {env}'s are {kind}")
        if not (np_isfinite(sp.action_low) and np_isfinite(sp.action_high)):
            raise ValueError(f"{self.name} needs bounded actions; {env}'s Box has infinite bounds")

    def check_config(self, config: Any, env: EnvRef | str, resolved: ResolvedEnv | None = None) -> None:
        _module("offpolicy.config").check_config(config, env, resolved=resolved)

    def shard_memory_mb(self, config: Any, resolved: ResolvedEnv, shards: int) -> int:
        """The memory one of `shards` replay shards needs: its share of buffer_size rows."""
        sp = _module("envs.make").spaces_of(resolved)
        return int(_module("offpolicy.config").shard_memory_mb(config, sp, shards))

    def fragment_bytes(self, config: Any, resolved: ResolvedEnv, agents_in_worker: int) -> int:
        sp = _module("envs.make").spaces_of(resolved).keep(config.obs_keys)
        rows = config.fragment_length * self.worker_envs(config, agents_in_worker)
        return int(rows * _module("offpolicy.config").transition_bytes(sp))

    def first_update(self, config: Any) -> tuple[int, str]:
        starts = int(config.learning_starts)
        return starts + 1, f"{config.section}.learning_starts = {starts:,}"

    def worker_envs(self, config: Any, agents_in_worker: int) -> int:
        return agents_in_worker * int(config.envs_per_agent)

    def calibrate(self, config: Any, env: EnvRef, agents_in_worker: int, budget: float = 1.0) -> Any:
        return _module("calibrate").offpolicy(self, config, env, agents_in_worker, budget)

    def checkpoint_policy(self, config: Any, resolved: ResolvedEnv, state: Any, seed: int = 0) -> Any:
        spaces = _module("envs.make").spaces_of(resolved)
        return _module("offpolicy.evaluator").checkpoint_policy(self, config, spaces, state, seed)

    def role_main(self, role: str) -> RoleMain:
        self.check_role(role)
        module = _module("offpolicy.shard" if role == "replay" else f"offpolicy.{role}")
        main = getattr(module, f"run_{role}")
        return main if role == "replay" else functools.partial(main, self)  # type: ignore[no-any-return]


def np_isfinite(array: Any) -> bool:
    import numpy as np

    return bool(np.isfinite(array).all())


# What a user's algorithm (`--algo MODULE:NAME`, registry.py) can get wrong that `surreal create`
# sees before anything runs; each is one ValueError naming the attribute or hook (the registry names
# the algorithm). Unchecked, each surfaced in a component as a crash of surreal's, retried.

REPLAY_ROLE = "replay"  # the one role make_program runs beyond learner, actor and evaluator


def check_algorithm(algorithm: Algorithm) -> None:
    """Raise ValueError when `algorithm` lacks a name or a hook its family calls, has roles the
    program cannot run, or a Config that is not its family's or that no spec file can hold."""
    family = next(f for f in (OffPolicy, OnPolicy, Algorithm) if isinstance(algorithm, f))
    if not isinstance(getattr(algorithm, "name", None), str):
        raise ValueError("name must be a string (status, logs and errors name the algorithm by it)")
    for hook in family.hooks:
        mine = getattr(type(algorithm), hook, None)
        if not callable(mine) or mine is getattr(family, hook):
            raise ValueError(f"no {hook} method: a subclass of {family.__name__} writes "
                             f"{', '.join(family.hooks)} (docs/algorithms/writing.md)")  # fmt: skip
    roles = algorithm.roles
    if not isinstance(roles, tuple | list) or not all(isinstance(r, str) for r in roles):
        raise ValueError(f"roles must be a tuple of role names, got {reprlib.repr(roles)}")
    missing = [r for r in family.roles if r not in roles]  # make_program runs each of them
    if missing:
        raise ValueError(f"roles {tuple(roles)} lack {missing[0]!r} (a run of a {family.__name__} "
                         f"algorithm has {', '.join(family.roles)})")  # fmt: skip
    # A family runs its own programs; an algorithm of its own may add replay shards (make_program).
    runs = (*family.roles, REPLAY_ROLE) if family is Algorithm else family.roles
    for role in roles:
        if role not in runs:
            raise ValueError(f"roles name {role!r}: {family.__name__} runs {', '.join(runs)} only")
    if isinstance(algorithm, OnPolicy | OffPolicy):
        _check_config_class(algorithm)
        made_by = f"{algorithm.Config.__name__}()"
        with their_hook(made_by):
            default = algorithm.Config()
        check_settings(algorithm, default, made_by)


def _check_config_class(algorithm: OnPolicy | OffPolicy) -> None:
    family = OffPolicy if isinstance(algorithm, OffPolicy) else OnPolicy
    base, config = family.Config, algorithm.Config
    if not (isinstance(config, type) and dataclasses.is_dataclass(config) and issubclass(config, base)):
        other = next((f.Config for f in (OnPolicy, OffPolicy) if isinstance(config, type)
                      and issubclass(config, f.Config) and config is not f.Config), None)  # fmt: skip
        got = getattr(config, "__name__", None) or reprlib.repr(config)
        raise ValueError(f"Config must be a dataclass deriving from {base.__name__} ({family.__name__}'s), "
                         f"got {got}{f', an {other.__name__}' if other else ''}")  # fmt: skip
    bounds.check_declared(config)
    try:  # --set and every spec file read a setting as its field's type
        typing.get_type_hints(config)
    except Exception as exc:  # noqa: BLE001 - whatever resolving the user's annotations raises
        raise ValueError(f"{config.__name__}'s field types cannot be resolved: {raised(exc)}") from None


def check_settings(algorithm: Algorithm, config: Any, made_by: str) -> None:
    """Raise ValueError when `config` (what `made_by` made: a preset, Config()) is not `algorithm`'s
    config, holds a value no spec file can, or its `validate` fails for another reason than a
    setting out of range."""
    if isinstance(algorithm, OnPolicy | OffPolicy):
        wanted, ok = f"of its Config, {algorithm.Config.__name__}", isinstance(config, algorithm.Config)
    else:
        wanted = "a config dataclass with validate()"
        ok = dataclasses.is_dataclass(config) and not isinstance(config, type) and hasattr(config, "validate")
    if not ok:
        raise ValueError(f"{made_by} returned an instance of {type(config).__name__}, not {wanted}")
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if not _writable(value):
            raise ValueError(f"{made_by}: {f.name} = {reprlib.repr(value)} cannot be written to the spec "
                             "file (a setting is None, a bool, int, float or str, or a list or mapping of "
                             "them)")  # fmt: skip
    with their_hook(f"{type(config).__name__}.validate()"):
        try:
            config.validate()
        except ValueError:
            pass  # a setting out of its range: create names it once --set and the config file had their say


def _writable(value: Any) -> bool:
    """Whether a setting's value is one a spec file (YAML, safe_dump) writes and reads back: exact
    types, as a numpy float or an enum is not."""
    if value is None or type(value) in (bool, int, float, str):
        return True
    if type(value) in (tuple, list):
        return all(_writable(v) for v in value)
    return type(value) is dict and all(type(k) is str and _writable(v) for k, v in value.items())


@contextlib.contextmanager
def their_hook(hook: str, refusals: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """Run a user's `hook`: whatever it raises, any BaseException but `ours` (a Ctrl-C, a stop asked
    for) and its `refusals` (passed on as they are), is one ValueError naming the hook and the
    exception."""
    try:
        yield
    except refusals:
        raise
    except BaseException as exc:
        if ours(exc):
            raise
        raise ValueError(f"{hook} raised {raised(exc)}") from None

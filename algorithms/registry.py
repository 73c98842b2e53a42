"""The algorithms surreal knows, and how each one is configured and run.

Imports of the algorithm modules are deferred so that validating a spec or rendering Kubernetes
objects does not pay for importing torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from surreal.algorithms.common.env_ref import EnvRef, ResolvedEnv
from surreal.algorithms.common.run import RunContext

RoleMain = Callable[[Any, RunContext], int]


@dataclass(frozen=True)
class Algorithm:
    name: str
    package: str  # holds presets.py and one module per role with run_<role>(cfg, ctx) -> int
    roles: tuple[str, ...] = ("learner", "actor", "evaluator")
    # Learner ranks (spec `learners`) it can train with; ES's results are a few numbers per
    # episode, so one master is never its bottleneck (docs/decisions.md).
    ranks: bool = True

    def resolve_env(self, env: EnvRef) -> ResolvedEnv:
        """Resolve `env` (builds one throwaway instance, with its kwargs) and check this algorithm
        can run on it: what `surreal create` writes into the spec file. Raises ValueError naming
        the problem."""
        resolved: ResolvedEnv = importlib.import_module("surreal.algorithms.common.envs").resolve_env(env)
        self.check_env(env, resolved)
        return resolved

    def preset(self, env: Any, agents: int, resolved: ResolvedEnv | None = None) -> Any:
        """The tuned configuration for `env` (an EnvRef or an id) and `agents` logical agents (a
        frozen dataclass); `resolved` (resolve_env's) spares resolving `env` again."""
        return self._presets().preset_for(env, agents, resolved=resolved)

    def default_steps(self, env: Any, agents: int, resolved: ResolvedEnv | None = None) -> int:
        """Env steps a run of `agents` agents on `env` trains for when none are given."""
        return int(self._presets().default_steps(env, agents, resolved=resolved))

    def check_env(self, env: Any, resolved: ResolvedEnv | None = None) -> None:
        """Raise ValueError when this algorithm cannot run on `env`'s spaces (`resolved`, or those
        of one instance built here, which raises when `env` cannot be resolved or made)."""
        check = getattr(self._presets(), "check_env_supported", None)
        if check is not None:
            check(env, resolved=resolved)
        elif resolved is None:
            importlib.import_module("surreal.algorithms.common.envs").resolve_env(env)

    def check_config(self, config: Any, env: Any, resolved: ResolvedEnv | None = None) -> None:
        """Raise ValueError when `config` cannot train on `env` (e.g. settings an image env refuses)."""
        check = getattr(self._presets(), "check_config", None)
        if check is not None:
            check(config, env, resolved=resolved)

    def fragment_bytes(self, config: Any, resolved: ResolvedEnv, agents_in_worker: int) -> int:
        """The bytes of one message of experience from a worker of `agents_in_worker` agents (0
        for an algorithm whose workers send only small results)."""
        size = getattr(self._presets(), "fragment_bytes", None)
        return int(size(config, resolved, agents_in_worker)) if size is not None else 0

    def check_local(self, config: Any) -> None:
        """Raise ValueError when `config` cannot run on this machine (e.g. a GPU it does not have)."""
        check = getattr(self._presets(), "check_local", None)
        if check is not None:
            check(config)

    def _presets(self) -> Any:
        return importlib.import_module(f"{self.package}.presets")

    def checkpoint_policy(self, config: Any, resolved: ResolvedEnv, state: Any, seed: int = 0) -> Any:
        """The policy in a checkpoint's `state` (load_checkpoint's) of a run of `config` on the
        environment `resolved` describes: an evaluator.TrainedAct (raw observations [N, ...] and
        `deterministic` -> actions [N, ...])."""
        spaces = importlib.import_module("surreal.algorithms.common.envs").spaces_of(resolved)
        module = importlib.import_module(f"{self.package}.evaluator")
        return module.checkpoint_policy(config, spaces, state, seed)

    def role_main(self, role: str) -> RoleMain:
        if role not in self.roles:
            raise ValueError(f"algorithm {self.name!r} has no role {role!r} (roles: {self.roles})")
        return getattr(importlib.import_module(f"{self.package}.{role}"), f"run_{role}")  # type: ignore[no-any-return]


ALGORITHMS: dict[str, Algorithm] = {
    "ppo": Algorithm("ppo", "surreal.algorithms.ppo"),
    "es": Algorithm("es", "surreal.algorithms.es", ranks=False),
}


def get_algorithm(name: str) -> Algorithm:
    try:
        return ALGORITHMS[name]
    except KeyError:
        known = ", ".join(sorted(ALGORITHMS))
        raise ValueError(f"unknown algorithm {name!r} (known: {known})") from None

"""The algorithms surreal knows, and how each one is configured and run.

Imports of the algorithm modules are deferred so that validating a spec or rendering Kubernetes
objects does not pay for importing torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from surreal.algorithms.common.run import RunContext

RoleMain = Callable[[Any, RunContext], int]


@dataclass(frozen=True)
class Algorithm:
    name: str
    package: str  # holds presets.py and one module per role with run_<role>(cfg, ctx) -> int
    roles: tuple[str, ...] = ("learner", "actor", "evaluator")

    def preset(self, env: Any, agents: int) -> Any:
        """The tuned configuration for `env` (an EnvRef or an id) and `agents` logical agents (a
        frozen dataclass)."""
        return importlib.import_module(f"{self.package}.presets").preset_for(env, agents)

    def default_steps(self, env: Any, agents: int) -> int:
        """Env steps a run of `agents` agents on `env` trains for when none are given."""
        return int(importlib.import_module(f"{self.package}.presets").default_steps(env, agents))

    def check_env(self, env: Any) -> None:
        """Raise ValueError when `env` (an EnvRef or an id) cannot be resolved or made, or this
        algorithm cannot run on its spaces. Builds one instance, with the env's kwargs."""
        importlib.import_module("surreal.algorithms.common.envs").check_env_id(env)
        module = importlib.import_module(f"{self.package}.presets")
        check = getattr(module, "check_env_supported", None)
        if check is not None:
            check(env)

    def check_config(self, config: Any, env: Any) -> None:
        """Raise ValueError when `config` cannot train on `env` (e.g. settings an image env refuses)."""
        check = getattr(importlib.import_module(f"{self.package}.presets"), "check_config", None)
        if check is not None:
            check(config, env)

    def check_local(self, config: Any) -> None:
        """Raise ValueError when `config` cannot run on this machine (e.g. a GPU it does not have)."""
        check = getattr(importlib.import_module(f"{self.package}.presets"), "check_local", None)
        if check is not None:
            check(config)

    def role_main(self, role: str) -> RoleMain:
        if role not in self.roles:
            raise ValueError(f"algorithm {self.name!r} has no role {role!r} (roles: {self.roles})")
        return getattr(importlib.import_module(f"{self.package}.{role}"), f"run_{role}")  # type: ignore[no-any-return]


ALGORITHMS: dict[str, Algorithm] = {
    "ppo": Algorithm("ppo", "surreal.algorithms.ppo"),
    "es": Algorithm("es", "surreal.algorithms.es"),
}


def get_algorithm(name: str) -> Algorithm:
    try:
        return ALGORITHMS[name]
    except KeyError:
        known = ", ".join(sorted(ALGORITHMS))
        raise ValueError(f"unknown algorithm {name!r} (known: {known})") from None

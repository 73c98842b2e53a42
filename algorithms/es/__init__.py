"""OpenAI-style evolution strategies: a master (the learner role) and stateless workers, on the
runtime's serving loop, checkpoints and evaluator, with roles of its own (api.Algorithm)."""

from __future__ import annotations

import importlib
from typing import Any

from surreal.algorithms.api import Algorithm, RoleMain


def _module(name: str) -> Any:
    return importlib.import_module(f"surreal.runtime.es.{name}")


class ES(Algorithm):
    name = "es"
    # docs/decisions.md
    one_learner = "its results are a few numbers per episode; one learner is never its bottleneck"

    def preset(self, env: Any, agents: int, resolved: Any = None) -> Any:
        return _module("presets").preset_for(env, agents, resolved=resolved)

    def default_steps(self, env: Any, agents: int, resolved: Any = None) -> int:
        return int(_module("presets").default_steps(env, agents, resolved=resolved))

    def check_env(self, env: Any, resolved: Any = None) -> None:
        _module("presets").check_env_supported(env, resolved=resolved)

    def check_config(self, config: Any, env: Any, resolved: Any = None) -> None:
        _module("presets").check_config(config, env, resolved=resolved)

    def checkpoint_policy(self, config: Any, resolved: Any, state: Any, seed: int = 0) -> Any:
        spaces = importlib.import_module("surreal.runtime.envs.make").spaces_of(resolved)
        return _module("evaluator").checkpoint_policy(config, spaces, state, seed)

    def role_main(self, role: str) -> RoleMain:
        self.check_role(role)
        return getattr(_module(role), f"run_{role}")  # type: ignore[no-any-return]

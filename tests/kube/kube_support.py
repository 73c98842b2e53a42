"""Shared by the tests of the Kubernetes layer (a plain module: `conftest` names collide)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from surreal.algorithms.registry import ALGORITHMS
from surreal.spec import ExperimentSpec, build_spec

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "surreal"
MANIFESTS = REPO / "manifests"
ALGOS = sorted(ALGORITHMS)  # every algorithm runs on Kubernetes
KUBE_VERSIONS = ("1.29", "1.30", "1.31", "1.32", "1.33")


def make_spec(name: str = "exp1", algo: str = "ppo", **flags: Any) -> ExperimentSpec:
    """What `surreal create NAME --algo ALGO --backend kube --FLAG ... --set K=V` builds."""
    overrides = flags.pop("overrides", None)
    flags.setdefault("env", ALGORITHMS[algo].default_env)  # one whose actions it takes
    return build_spec(name, flags={"algo": algo, "backend": "kube", **flags}, overrides=overrides)

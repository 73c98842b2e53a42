"""What `surreal create ... --backend kube --dry-run -o OUTPUT` prints: the rendered objects as
YAML or JSON, or values that make helm/surreal render the same objects. Pure.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import yaml

from surreal.orchestrator.kube import pods as pods
from surreal.orchestrator.kube.render import (
    TENSORBOARD_RESOURCES,
    RenderError,
    RenderSettings,
    kube_program,
    kube_spec,
    render,
)
from surreal.orchestrator.program import replay_shards
from surreal.provisioner import ROLES, NodePool, Placement, placement_for
from surreal.spec import RESOLVED, SIZING, ExperimentSpec


class _Dumper(yaml.SafeDumper):
    """Block scalars for multi-line strings (the spec reads as YAML), no anchors or aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(objects: list[dict[str, Any]]) -> str:
    """A multi-document YAML stream, as `kubectl apply -f -` takes it."""
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, default_flow_style=False)


OUTPUTS = ("yaml", "json", "helm-values")


def dry_run(
    spec: ExperimentSpec,
    output: str = "yaml",
    *,
    token: str,
    placement: Mapping[str, Placement] | None = None,
    settings: RenderSettings | None = None,
) -> str:
    """What `surreal create ... --backend kube --dry-run -o OUTPUT` prints: the objects as YAML
    documents or a JSON v1 List (both `kubectl apply -f -` takes), or values for helm/surreal."""
    if output == "helm-values":
        header = f"# helm install {spec.name} helm/surreal -n {spec.namespace} -f THIS_FILE\n"
        return header + to_yaml([helm_values(spec, placement, settings)])
    objects = render(spec, placement, token=token, settings=settings)
    if output == "json":
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2) + "\n"
    if output == "yaml":
        return to_yaml(objects)
    raise RenderError(f"unknown output {output!r} (one of {', '.join(OUTPUTS)})")


def helm_values(
    spec: ExperimentSpec,
    placement: Mapping[str, Placement] | None = None,
    settings: RenderSettings | None = None,
) -> dict[str, Any]:
    """Values for helm/surreal that make the chart render what `render` renders for `spec`; the
    release name is the experiment name. `resolved` (what create found by resolving the
    environment) is left out for a spec without one and for infinite action bounds, which Helm
    cannot read from a values file: the components then resolve the environment at start."""
    settings = settings or RenderSettings()
    spec = kube_spec(spec)
    program = kube_program(spec)
    placement = placement or {}

    def role(name: str, resources: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
        where = placement.get(name, Placement())
        return {
            "resources": _copy(settings.resources.get(name) or resources),
            "nodeSelector": dict(where.node_selector),
            "tolerations": [dict(t) for t in where.tolerations],
            "gpu": where.gpu,
        }

    tb = {"requests": dict(TENSORBOARD_RESOURCES), "limits": dict(TENSORBOARD_RESOURCES)}
    data = spec.to_dict()
    shards = replay_shards(spec)  # written only for replay, so that on-policy values stay as they were
    return {
        "algo": spec.algo,
        "env": spec.env,
        "envKwargs": dict(spec.env_kwargs),
        "agents": spec.agents,
        # Written only for ranks, so that values files of one learner stay as they were.
        **({"learners": spec.learners} if spec.learners > 1 else {}),
        **({"learnerPods": spec.learner_pods} if spec.learner_pods > 1 else {}),
        **({"replayShards": shards} if shards else {}),
        "agentsPerPod": spec.agents_per_pod,
        "steps": spec.steps,
        "seed": spec.seed,
        "gpu": spec.gpu,
        "namespace": spec.namespace,
        "image": spec.image,
        "imagePullPolicy": settings.image_pull_policy,
        # Written only when set, so that values files of specs without a queue stay as they were.
        **({"queue": spec.queue} if spec.queue else {}),
        "config": data[spec.algo],
        **({RESOLVED: data[RESOLVED]} if _helm_readable(data.get(RESOLVED)) else {}),
        **({SIZING: data[SIZING]} if SIZING in data else {}),  # how create packed the agents
        "storage": {
            "type": settings.storage,
            "size": settings.storage_size,
            "storageClassName": settings.storage_class,
        },
        "learner": role("learner", pods.default_resources(program.component("learner"))),
        "actor": role("actor", pods.default_resources(program.component("actor-0"))),
        "evaluator": role("evaluator", pods.default_resources(program.component("evaluator"))),
        **(
            {"replay": role("replay", pods.default_resources(program.component("replay-0")))}
            if shards
            else {}
        ),
        "tensorboard": {"resources": _copy(settings.resources.get("tensorboard") or tb)},
    }


def _helm_readable(resolved: Mapping[str, Any] | None) -> bool:
    if resolved is None:
        return False
    bounds = [*(resolved["action_low"] or ()), *(resolved["action_high"] or ())]
    return all(math.isfinite(b) for b in bounds)


def _copy(resources: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, str]]:
    return {kind: dict(amounts) for kind, amounts in resources.items()}


def placements(
    spec: ExperimentSpec, pools: tuple[NodePool, ...], provider: str | None
) -> dict[str, Placement]:
    """Where each role runs, from the provisioner's node pools: the learner on the GPU pool when the
    spec asks for GPUs, everything else on the CPU pool (empty placements on kind/minikube)."""
    return {
        role: placement_for(role, spec.gpu if role == "learner" else 0, pools, provider) for role in ROLES
    }

"""manifests/: the examples are what the CLI's dry run prints today; RBAC grants exactly what the
kube launcher uses; the kind config is one kind takes.

Regenerate the examples after a change to the renderer:
    SURREAL_UPDATE_EXAMPLES=1 python -m pytest tests/kube/test_manifests.py
(or run the commands in manifests/examples/README.md).
"""

from __future__ import annotations

import os
from typing import Any

import kubernetes_validate
import pytest
import yaml
from fake_api import FakeApi, fake_client
from jobset_schema import validate
from kube_support import KUBE_VERSIONS, MANIFESTS, make_spec
from kubernetes.utils import parse_quantity

from surreal.orchestrator.kube import output as ko
from surreal.orchestrator.kube.client import KubeClient
from surreal.orchestrator.kube.render import render

# The token of the examples; manifests/examples/README.md says to replace it before applying.
EXAMPLE_TOKEN = "example-token-replace-me-before-applying"
# file -> (experiment name, CLI flags, --set overrides, -o output)
EXAMPLES: dict[str, tuple[str, dict[str, Any], dict[str, str], str]] = {
    "ppo-512.yaml": ("ppo-512", {"agents": 512}, {}, "yaml"),
    "ppo-512.values.yaml": ("ppo-512", {"agents": 512}, {}, "helm-values"),
    "ppo-pendulum-packed.yaml": (
        "ppo-pendulum",
        {"env": "Pendulum-v1", "agents": 64},
        {"agents_per_pod": "8"},
        "yaml",
    ),
    "ppo-gpu.yaml": ("ppo-gpu", {"agents": 16, "gpu": 1}, {}, "yaml"),
    "ppo-ranks.yaml": ("ppo-ranks", {"agents": 64, "learners": 4}, {}, "yaml"),
    "ppo-queued.yaml": ("ppo-queued", {"agents": 64, "learners": 4, "queue": "team-a"}, {}, "yaml"),
}


def example_text(file: str) -> str:
    name, flags, overrides, output = EXAMPLES[file]
    spec = make_spec(name, overrides=overrides, **flags)
    return ko.dry_run(spec, output, token=EXAMPLE_TOKEN)


@pytest.mark.parametrize("file", EXAMPLES)
def test_examples_are_what_the_dry_run_prints(file: str) -> None:
    path = MANIFESTS / "examples" / file
    expected = example_text(file)
    if os.environ.get("SURREAL_UPDATE_EXAMPLES"):
        path.write_text(expected)
    assert path.exists(), f"{path} is missing: SURREAL_UPDATE_EXAMPLES=1 pytest {__file__}"
    assert path.read_text() == expected, (
        f"{path.name} is stale: SURREAL_UPDATE_EXAMPLES=1 python -m pytest tests/kube/test_manifests.py"
    )


def test_every_example_file_is_known_and_documented() -> None:
    files = {p.name for p in (MANIFESTS / "examples").glob("*.yaml")}
    assert files == set(EXAMPLES)
    readme = (MANIFESTS / "examples" / "README.md").read_text()
    for file in EXAMPLES:
        assert file in readme


@pytest.mark.parametrize("file", [f for f in EXAMPLES if EXAMPLES[f][3] == "yaml"])
def test_examples_validate_strictly(file: str) -> None:
    for obj in yaml.safe_load_all((MANIFESTS / "examples" / file).read_text()):
        for version in KUBE_VERSIONS:
            validate(obj, version)


def rbac_rules() -> set[tuple[str, str]]:
    docs = list(yaml.safe_load_all((MANIFESTS / "rbac.yaml").read_text()))
    for doc in docs:
        kubernetes_validate.validate(doc, "1.33", strict=True)
    [role] = [d for d in docs if d["kind"] == "Role"]
    granted = set()
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                base, _, sub = resource.partition("/")
                name = base + (f".{group}" if group else "") + (f"/{sub}" if sub else "")
                granted |= {(verb, name) for verb in rule["verbs"]}
    return granted


def test_rbac_role_grants_exactly_what_the_launcher_uses() -> None:
    api = FakeApi()
    launcher = KubeClient(fake_client(api), context="kind-surreal", exec_=lambda *_: b"")
    spec = make_spec(agents=2)
    launcher.create(spec)
    launcher.list_experiments("default")
    launcher.status("exp1", "default", learner=False)
    api.add("pods", {"metadata": {"name": "exp1-learner-0", "namespace": "default",
                                  "labels": {"surreal.io/experiment": "exp1",
                                             "surreal.io/component": "learner"}},
                     "status": {"containerStatuses": [{"name": "learner", "ready": True, "restartCount": 0,
                                                       "image": "i", "imageID": "",
                                                       "state": {"running": {}}}]}})  # fmt: skip
    list(launcher.logs("exp1", "default", "learner"))
    launcher.scale("exp1", "default", 4)
    launcher.delete("exp1", "default")
    # A queued experiment: one JobSet, its Workload read and deactivated by a resize, which
    # suspends the JobSet itself where Kueue made no Workload.
    del api.objects[("pods", "default", "exp1-learner-0")]  # it went with the first experiment
    launcher.create(make_spec(agents=2, queue="team-a"))
    launcher.status("exp1", "default", learner=False)
    launcher.scale("exp1", "default", 4)  # no Workload: the JobSet is suspended itself (patch)
    uid = api.objects[("jobsets.jobset.x-k8s.io", "default", "exp1")]["metadata"]["uid"]
    owner = {"kind": "JobSet", "name": "exp1", "uid": uid}
    api.add("workloads.kueue.x-k8s.io",
            {"metadata": {"name": "w", "namespace": "default", "ownerReferences": [owner]},
             "spec": {"active": True}})  # fmt: skip
    launcher.scale("exp1", "default", 2)
    launcher.delete("exp1", "default")
    used = {(r.verb, r.resource) for r in api.requests}
    # Namespaces are cluster-scoped (a Role cannot grant them; create copes with a refusal).
    used.discard(("get", "namespaces"))
    # Not visible to the fake: reading the token (status with a learner), the port-forward
    # websocket (status, tensorboard), the exec websocket (plot, scale) and the finalizer update that
    # blockOwnerDeletion implies.
    unseen = {("get", "secrets"), ("get", "pods/portforward"), ("create", "pods/portforward"),
              ("get", "pods/exec"), ("create", "pods/exec"), ("update", "configmaps/finalizers")}  # fmt: skip
    assert rbac_rules() == used | unseen


def test_kind_cluster_config_is_a_kind_cluster() -> None:
    config = yaml.safe_load((MANIFESTS / "kind-cluster.yaml").read_text())
    assert config["kind"] == "Cluster" and config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    roles = [n["role"] for n in config["nodes"]]
    assert roles.count("control-plane") == 1 and "worker" in roles
    assert set(config) <= {"kind", "apiVersion", "name", "nodes", "networking", "featureGates"}


def test_the_kueue_queue_for_kind_covers_and_admits_a_queued_experiment() -> None:
    """manifests/kueue-team-a.yaml (`make kueue-up`): Kueue admits a workload only if its queue
    covers every resource its pods request, within the quota; the e2e experiment's must fit."""
    docs = {d["kind"]: d for d in yaml.safe_load_all((MANIFESTS / "kueue-team-a.yaml").read_text())}
    assert set(docs) == {"ResourceFlavor", "ClusterQueue", "LocalQueue"}
    assert all(d["apiVersion"] == "kueue.x-k8s.io/v1beta1" for d in docs.values())
    assert docs["LocalQueue"]["metadata"]["name"] == "team-a"
    assert docs["LocalQueue"]["spec"]["clusterQueue"] == docs["ClusterQueue"]["metadata"]["name"]
    [group] = docs["ClusterQueue"]["spec"]["resourceGroups"]
    [flavor] = group["flavors"]
    assert flavor["name"] == docs["ResourceFlavor"]["metadata"]["name"]
    quota = {r["name"]: parse_quantity(r["nominalQuota"]) for r in flavor["resources"]}
    assert set(quota) == set(group["coveredResources"])
    [jobset] = [o for o in render(make_spec(agents=2, queue="team-a"), token="t") if o["kind"] == "JobSet"]
    wanted: dict[str, Any] = {}
    for rjob in jobset["spec"]["replicatedJobs"]:
        pods = rjob["template"]["spec"]["parallelism"]
        for container in rjob["template"]["spec"]["template"]["spec"]["containers"]:
            for resource, amount in container["resources"]["requests"].items():
                wanted[resource] = wanted.get(resource, 0) + pods * parse_quantity(amount)
    assert set(wanted) <= set(quota), (wanted, quota)
    assert all(wanted[r] <= quota[r] for r in wanted), (wanted, quota)

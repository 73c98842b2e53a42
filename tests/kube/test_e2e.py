"""create / status / scale / logs / delete against a real cluster (`make e2e`).

Runs only when SURREAL_E2E_KUBECONFIG names a kubeconfig; optional: SURREAL_E2E_CONTEXT,
SURREAL_E2E_NAMESPACE (default "default"), SURREAL_E2E_IMAGE (default surreal:local, which
`make kind-load` puts on a kind cluster), SURREAL_E2E_QUEUE (a Kueue LocalQueue in that namespace:
`make kueue-up` installs JobSet and Kueue and makes `team-a`; the queued tests run only with it).
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Iterator

import pytest
from kube_support import make_spec

from surreal.orchestrator.kube import render as kr
from surreal.orchestrator.kube.client import ExperimentExists, KubeClient, NamespaceMissing

KUBECONFIG = os.environ.get("SURREAL_E2E_KUBECONFIG")
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not KUBECONFIG, reason="set SURREAL_E2E_KUBECONFIG to run against a cluster"),
]
NAMESPACE = os.environ.get("SURREAL_E2E_NAMESPACE", "default")
QUEUE = os.environ.get("SURREAL_E2E_QUEUE")


def wait_for(what: str, check: Callable[[], bool], timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(3)


@pytest.fixture
def cluster() -> KubeClient:
    return KubeClient.connect(os.environ.get("SURREAL_E2E_CONTEXT"), KUBECONFIG)


@pytest.fixture
def experiment(cluster: KubeClient) -> Iterator[str]:
    name = f"e2e-{secrets.token_hex(3)}"
    spec = make_spec(name, agents=2, steps=20_000, namespace=NAMESPACE,
                     image=os.environ.get("SURREAL_E2E_IMAGE", kr.DEFAULT_IMAGE))  # fmt: skip
    cluster.create(spec)
    try:
        yield name
    finally:
        cluster.delete(name, NAMESPACE)


def test_lifecycle_on_a_real_cluster(cluster: KubeClient, experiment: str) -> None:
    name = experiment
    assert name in [row["name"] for row in cluster.list_experiments(NAMESPACE)]

    def learning() -> bool:
        st = cluster.status(name, NAMESPACE)
        return st["learner_status"] == "ok" and (st["env_steps"] or 0) > 0

    wait_for("the learner to report env steps over the port-forward", learning)
    assert any(line.strip() for line in cluster.logs(name, NAMESPACE, "learner", tail=50))
    assert cluster.scale(name, NAMESPACE, 4) == 4
    wait_for(
        "4 actor pods", lambda: cluster.status(name, NAMESPACE, learner=False)["actor_pods"]["total"] == 4
    )
    with pytest.raises(ExperimentExists):
        cluster.create(make_spec(name, namespace=NAMESPACE, image=kr.DEFAULT_IMAGE))


def test_a_run_completes_frees_its_pods_and_survives_a_learner_eviction(cluster: KubeClient) -> None:
    """The learner's pod deleted mid-run (SIGTERM, as a drain or preemption does): it saves, its
    Job replaces it without counting a failure; at the end every Job completes, no learner, actor
    or evaluator pod runs, and status still has the final numbers (the termination message)."""
    name = f"e2e-{secrets.token_hex(3)}"
    spec = make_spec(name, agents=2, steps=60_000, namespace=NAMESPACE,
                     image=os.environ.get("SURREAL_E2E_IMAGE", kr.DEFAULT_IMAGE))  # fmt: skip
    cluster.create(spec)
    try:
        wait_for("updates", lambda: (cluster.status(name, NAMESPACE)["updates"] or 0) > 5)
        [pod] = [p["metadata"]["name"] for p in cluster.pods(NAMESPACE, f"surreal.io/experiment={name},"
                 "surreal.io/component=learner")]  # fmt: skip
        cluster.core.delete_namespaced_pod(pod, NAMESPACE)
        wait_for(
            "the run to end", lambda: cluster.status(name, NAMESPACE)["phase"] in ("Succeeded", "Failed")
        )
        st = cluster.status(name, NAMESPACE)
        assert st["phase"] == "Succeeded" and st["env_steps"] >= 60_000 and st["eval_return"] is not None, st
        jobs = {j["role"]: j for j in st["jobs"]}
        assert {j["state"] for j in jobs.values()} == {"Complete"} and jobs["learner"]["failed"] == 0, jobs
        wait_for("every Job pod to end", lambda: not [
            c for c in cluster.status(name, NAMESPACE, learner=False)["components"]
            if c["role"] != "tensorboard" and c["state"] in ("Running", "Starting")])  # fmt: skip
    finally:
        cluster.delete(name, NAMESPACE)


def test_two_learner_ranks_in_the_learner_pod_finish_a_run(cluster: KubeClient) -> None:
    """`--learners 2`: one learner pod runs both ranks (ports 6000 and 6001 of the learner's
    Service), each actor pod reaches its rank, and the run completes with both ranks' intake."""
    name = f"e2e-{secrets.token_hex(3)}"
    spec = make_spec(name, agents=2, learners=2, steps=40_000, namespace=NAMESPACE,
                     image=os.environ.get("SURREAL_E2E_IMAGE", kr.DEFAULT_IMAGE))  # fmt: skip
    cluster.create(spec)
    try:
        wait_for(
            "the run to end", lambda: cluster.status(name, NAMESPACE)["phase"] in ("Succeeded", "Failed")
        )
        st = cluster.status(name, NAMESPACE)
        assert st["phase"] == "Succeeded" and st["env_steps"] >= 40_000, st
        assert st["group_restarts"] == 0, st  # the termination message carries it
        assert {j["state"] for j in st["jobs"]} == {"Complete"}, st["jobs"]
    finally:
        cluster.delete(name, NAMESPACE)


def test_missing_namespace_on_a_real_cluster(cluster: KubeClient) -> None:
    spec = make_spec("e2e-nons", namespace=f"surreal-missing-{secrets.token_hex(3)}", image="x")
    with pytest.raises(NamespaceMissing):
        cluster.create(spec)


def test_delete_leaves_nothing(cluster: KubeClient) -> None:
    name = f"e2e-{secrets.token_hex(3)}"
    cluster.create(
        make_spec(name, namespace=NAMESPACE, image=os.environ.get("SURREAL_E2E_IMAGE", kr.DEFAULT_IMAGE))
    )
    cluster.delete(name, NAMESPACE)
    assert name not in [row["name"] for row in cluster.list_experiments(NAMESPACE)]
    assert cluster.pods(NAMESPACE, f"surreal.io/experiment={name}") == [] or all(
        p["metadata"].get("deletionTimestamp")
        for p in cluster.pods(NAMESPACE, f"surreal.io/experiment={name}")
    )


@pytest.mark.skipif(not QUEUE, reason="set SURREAL_E2E_QUEUE to a Kueue LocalQueue (make kueue-up)")
def test_a_queued_experiment_is_admitted_as_one_resized_through_a_suspend_and_succeeds(
    cluster: KubeClient,
) -> None:
    """`--queue`: one JobSet, one Workload admitted for all its pods; `surreal scale` suspends it
    (the learner saves), makes it again at 4 actor pods, Kueue admits that, the learner resumes
    from its checkpoint (no update lost: it goes on from at least the updates it had), and the run
    ends Succeeded."""
    name = f"e2e-{secrets.token_hex(3)}"
    spec = make_spec(name, agents=2, steps=60_000, namespace=NAMESPACE, queue=QUEUE,
                     image=os.environ.get("SURREAL_E2E_IMAGE", kr.DEFAULT_IMAGE))  # fmt: skip
    cluster.create(spec)
    try:
        assert len(cluster.workloads(name, NAMESPACE)) <= 1
        wait_for(
            "admission", lambda: cluster.status(name, NAMESPACE, learner=False).get("admission") == "Admitted"
        )
        assert len(cluster.workloads(name, NAMESPACE)) == 1
        wait_for("updates", lambda: (cluster.status(name, NAMESPACE)["updates"] or 0) > 5)
        before = cluster.status(name, NAMESPACE)["updates"]
        assert cluster.scale(name, NAMESPACE, 4) == 4
        wait_for("the new size admitted", lambda: cluster.status(name, NAMESPACE, learner=False)
                 .get("admission") == "Admitted")  # fmt: skip
        wait_for(
            "the learner to report again", lambda: cluster.status(name, NAMESPACE)["learner_status"] == "ok"
        )
        st = cluster.status(name, NAMESPACE)
        assert st["updates"] >= before and st["agents"] == 4, (before, st)
        wait_for(
            "the run to end", lambda: cluster.status(name, NAMESPACE)["phase"] in ("Succeeded", "Failed")
        )
        st = cluster.status(name, NAMESPACE)
        assert st["phase"] == "Succeeded" and st["env_steps"] >= 60_000, st
    finally:
        cluster.delete(name, NAMESPACE)

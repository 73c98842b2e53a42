"""A queued experiment (`--queue`) against the in-memory API server, with hooks that play Kueue and
the JobSet controller: created as one JobSet that is the one admission; admitted, running,
suspended for a resize, made again at the new size and admitted again; a resize cut short and
finished by `surreal scale` again; deleted through the root. That the learner saves on the SIGTERM
of its suspension and resumes with 0 updates lost is the learner's own (tests/integration's
preemption tests; in containers, tests/containers)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from fake_api import FakeApi, Request, fake_client
from jobset_schema import validate_jobset
from kube_support import make_spec

from surreal.orchestrator.kube import observe as ks
from surreal.orchestrator.kube.client import KubeClient, KubeError
from surreal.orchestrator.kube.pods import Placement
from surreal.orchestrator.launcher import UsageError

JOBSETS = "jobsets.jobset.x-k8s.io"
WORKLOADS = "workloads.kueue.x-k8s.io"


def pod(name: str, role: str) -> dict[str, Any]:
    container = {"name": role, "ready": True, "restartCount": 0, "image": "i", "imageID": "",
                 "state": {"running": {}}}  # fmt: skip
    labels = {
        "app.kubernetes.io/name": "surreal",
        "surreal.io/experiment": "exp1",
        "surreal.io/component": role,
    }
    return {"metadata": {"name": name, "namespace": "default", "labels": labels},
            "status": {"phase": "Running", "containerStatuses": [container]}}  # fmt: skip


class Cluster:
    """Kueue and the JobSet controller, as far as a resize needs them: `admit()` makes the JobSet's
    Workload, admits it and unsuspends the JobSet, whose pods then run; a Workload deactivated
    suspends the JobSet, and its pods go once `stop_pods` allows (the learner's grace period)."""

    def __init__(self, api: FakeApi) -> None:
        self.api, self.stop_pods, self.admitted = api, True, 0
        api.after.append(self.react)

    def jobset(self) -> dict[str, Any]:
        return self.api.objects[(JOBSETS, "default", "exp1")]

    def admit(self) -> None:
        jobset = self.jobset()
        self.admitted += 1
        owner = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "exp1",
                 "uid": jobset["metadata"]["uid"]}  # fmt: skip
        self.api.add(WORKLOADS, {
            "metadata": {"name": f"jobset-exp1-{self.admitted}", "namespace": "default",
                         "ownerReferences": [owner]},
            "spec": {"active": True},
            "status": {"conditions": [{"type": "QuotaReserved", "status": "True"},
                                      {"type": "Admitted", "status": "True"}]},
        })  # fmt: skip
        jobset["spec"]["suspend"] = False
        actors = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == "actor")
        self.api.add("pods", pod("exp1-learner-0-0-abcde", "learner"))
        for i in range(actors["template"]["spec"]["parallelism"]):
            self.api.add("pods", pod(f"exp1-actor-0-{i}-abcde", "actor"))

    def react(self, request: Request) -> None:
        if (
            request.verb == "patch"
            and request.resource == WORKLOADS
            and request.body["spec"]["active"] is False
        ):
            self.jobset()["spec"]["suspend"] = True
        suspended = (JOBSETS, "default", "exp1") in self.api.objects and self.jobset()["spec"]["suspend"]
        if suspended and self.stop_pods:
            for key in [k for k in self.api.objects if k[0] == "pods"]:
                del self.api.objects[key]


@pytest.fixture
def cluster() -> tuple[FakeApi, KubeClient, Cluster]:
    api = FakeApi()
    k = KubeClient(fake_client(api), context="kind-surreal", delete_timeout=2.0, poll_seconds=0.01,
                   resize_stop_seconds=1.0)  # fmt: skip
    k.create(make_spec(agents=4, queue="team-a"), token="tok")
    return api, k, Cluster(api)


def test_created_as_one_jobset_queued_then_admitted_then_running(cluster) -> None:
    api, k, kueue = cluster
    assert not api.names("jobs.batch") and api.names(JOBSETS) == ["exp1"]
    status = k.status("exp1", "default", learner=False)
    assert status["phase"] == "Pending" and status["admission"] == "Queued" and status["queued"] == "team-a"
    assert not status["components"]  # a suspended experiment holds no pod
    kueue.admit()
    status = k.status("exp1", "default", learner=False)
    assert status["admission"] == "Admitted" and status["phase"] == "Running"
    assert {c["role"] for c in status["components"]} == {"learner", "actor"}


def test_a_resize_suspends_then_makes_the_jobset_again_at_the_new_size(cluster) -> None:
    api, k, kueue = cluster
    kueue.admit()
    seen: list[str | None] = []
    api.after.append(lambda r: seen.append(root_annotations(api).get(ks.RESIZE_ANNOTATION))
                     if r.verb == "delete" and r.resource == JOBSETS else None)  # fmt: skip
    old_uid = kueue.jobset()["metadata"]["uid"]
    old_spec = copy.deepcopy(kueue.jobset()["spec"])
    api.requests.clear()
    assert k.scale("exp1", "default", 8) == 8
    # In order: say it on the root, deactivate the Workload (Kueue suspends the JobSet, the learner
    # saves on SIGTERM), wait for the learner to go, delete the JobSet, make it again at the new size.
    writes = [(r.verb, r.resource) for r in api.requests if r.verb in ("patch", "delete", "create")]
    assert writes == [("patch", "configmaps"), ("patch", WORKLOADS), ("delete", JOBSETS),
                      ("patch", "configmaps"), ("create", JOBSETS), ("patch", "configmaps")]  # fmt: skip
    assert seen == ["8"]  # while it was suspended, the root said why
    jobset = kueue.jobset()
    assert jobset["metadata"]["uid"] != old_uid and jobset["spec"]["suspend"] is True  # Kueue admits it anew
    actors = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == "actor")["template"]["spec"]
    assert actors["completions"] == actors["parallelism"] == 8
    # Made again from the spec, it is the JobSet it was but for the actors' count (and suspended).
    old_actors = next(r for r in old_spec["replicatedJobs"] if r["name"] == "actor")["template"]["spec"]
    old_actors.update(completions=8, parallelism=8)
    assert jobset["spec"] == {**old_spec, "suspend": True}
    [owner] = jobset["metadata"]["ownerReferences"]  # still deleted with the experiment
    assert owner["kind"] == "ConfigMap" and owner["name"] == "exp1-spec"
    assert jobset["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert "status" not in jobset and "resourceVersion" not in jobset["metadata"]
    root = api.objects[("configmaps", "default", "exp1-spec")]
    assert yaml.safe_load(root["data"]["spec.yaml"])["agents"] == 8  # what the learner starts with
    assert set(root["data"]) == {"spec.yaml"} and ks.RESIZE_ANNOTATION not in root_annotations(api)
    assert k.status("exp1", "default", learner=False)["admission"] == "Queued"
    kueue.admit()
    status = k.status("exp1", "default", learner=False)
    assert status["admission"] == "Admitted" and status["agents"] == 8
    assert sum(c["role"] == "actor" for c in status["components"]) == 8
    assert k.list_experiments("default")[0]["agents"] == 8
    k.delete("exp1", "default")
    # The JobSet went with the root, and its Workload with it; the fake's pods have no owner to follow.
    assert {key[0] for key in api.objects} == {"pods"}


def root_annotations(api: FakeApi) -> dict[str, str]:
    return api.objects[("configmaps", "default", "exp1-spec")]["metadata"].get("annotations") or {}


def test_a_resize_cut_short_is_said_in_status_and_finished_by_scale_again(cluster) -> None:
    api, k, kueue = cluster
    kueue.admit()
    api.fail[("create", JOBSETS)] = 500
    with pytest.raises(KubeError):
        k.scale("exp1", "default", 8)
    assert not api.names(JOBSETS)  # deleted, not yet made again: the root keeps what to make
    status = k.status("exp1", "default", learner=False)
    assert status["admission"] == "Suspended for resize to 8 agents"
    del api.fail[("create", JOBSETS)]
    assert k.scale("exp1", "default", 8) == 8
    actors = next(r for r in kueue.jobset()["spec"]["replicatedJobs"] if r["name"] == "actor")
    assert actors["template"]["spec"]["parallelism"] == 8
    assert k.status("exp1", "default", learner=False)["admission"] == "Queued"


def test_a_learner_that_does_not_go_stops_the_resize_before_anything_is_deleted(cluster) -> None:
    api, k, kueue = cluster
    kueue.admit()
    kueue.stop_pods = False
    with pytest.raises(KubeError, match=r"learner pod exp1-learner-0-0-abcde is still there after 1 s; "
                                        r"`surreal scale` again finishes the resize"):  # fmt: skip
        k.scale("exp1", "default", 8)
    assert api.names(JOBSETS) == ["exp1"] and not api.sent("delete")
    assert k.status("exp1", "default", learner=False)["admission"] == "Suspended for resize to 8 agents"
    kueue.stop_pods = True
    assert k.scale("exp1", "default", 8) == 8


def test_bad_sizes_are_refused_before_anything_changes(cluster) -> None:
    api, k, kueue = cluster
    kueue.admit()
    with pytest.raises(UsageError, match=r"positive multiple of agents_per_pod \(1\), got 0"):
        k.scale("exp1", "default", 0)
    assert not api.sent("patch") and not api.sent("delete")


def test_a_cluster_without_jobset_refuses_a_queue_and_nothing_is_created() -> None:
    api = FakeApi(unserved={JOBSETS})
    k = KubeClient(fake_client(api), context="kind-surreal")
    with pytest.raises(KubeError, match=r"does not serve jobset.x-k8s.io: install JobSet"):
        k.create(make_spec(agents=4, queue="team-a"), token="tok")
    assert not api.objects and not api.sent("create")
    k.create(make_spec(agents=4), token="tok")  # without a queue: plain Jobs, no JobSet needed
    assert api.names("jobs.batch") == ["exp1-actor", "exp1-evaluator", "exp1-learner"]


def test_a_resize_to_more_learner_pods_remakes_what_the_pods_change_and_keeps_the_placement() -> None:
    """`surreal scale --agents 6 --learner-pods 2` of an experiment of 2 ranks in one pod, whose
    learner a pools file put on a tainted GPU pool: the new JobSet has the peers' Job, the headless
    ranks Service is made, the learner's Service, NetworkPolicy and budget are made again, the root
    holds the new spec; the learner pods keep their node pool, taint toleration and GPU. The
    JobSet is strictly valid; the objects made are those `create` makes at the new size."""
    api = FakeApi()
    k = KubeClient(fake_client(api), context="kind-surreal", delete_timeout=2.0, poll_seconds=0.01,
                   resize_stop_seconds=1.0)  # fmt: skip
    taint = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}
    where = {"learner": Placement({"surreal.io/pool": "gpu"}, [taint], gpu=1),
             "actor": Placement({"surreal.io/pool": "cpu"})}  # fmt: skip
    k.create(make_spec(agents=4, learners=2, queue="team-a"), token="tok", placement=where)
    kueue = Cluster(api)
    kueue.admit()
    api.requests.clear()
    assert k.scale("exp1", "default", 6, learner_pods=2) == 6
    writes = [(r.verb, r.resource) for r in api.requests if r.verb in ("delete", "create")]
    # The JobSet (its pods) goes first and comes last; every delete before any create.
    assert writes[0] == ("delete", JOBSETS) and writes[-1] == ("create", JOBSETS), writes
    policies = ["networkpolicies.networking.k8s.io", "poddisruptionbudgets.policy"]
    assert sorted(writes[1:4]) == [("delete", r) for r in (*policies, "services")], writes
    assert sorted(writes[4:-1]) == [("create", r) for r in (*policies, "services", "services")], writes
    assert api.names("services") == ["exp1-learner", "exp1-ranks", "exp1-tensorboard"]
    root = api.objects[("configmaps", "default", "exp1-spec")]
    spec = yaml.safe_load(root["data"]["spec.yaml"])
    assert (spec["agents"], spec["learners"], spec["learner_pods"]) == (6, 2, 2)
    jobset = kueue.jobset()
    assert [r["name"] for r in jobset["spec"]["replicatedJobs"]] == ["learner", "learner-peers", "actor",
                                                                     "evaluator"]  # fmt: skip
    for name in ("learner", "learner-peers"):
        rjob = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == name)
        pod = rjob["template"]["spec"]["template"]
        assert pod["spec"]["nodeSelector"] == {"surreal.io/pool": "gpu"}
        assert pod["spec"]["tolerations"] == [taint]
        assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert pod["spec"]["subdomain"] == "exp1-ranks"
    pdb = api.objects[("poddisruptionbudgets.policy", "default", "exp1-learner")]
    assert pdb["spec"]["minAvailable"] == 2  # both learner pods
    for version in ("1.29.0", "1.33.0"):
        validate_jobset({k_: v for k_, v in jobset.items() if k_ != "status"}, version)
    # What `create` makes at the new size, object by object (the root's and Secret's own aside).
    fresh = FakeApi()
    KubeClient(fake_client(fresh), context="kind-surreal").create(
        make_spec(agents=6, learners=2, learner_pods=2, queue="team-a"), token="tok", placement=where
    )
    for key, obj in fresh.objects.items():
        if key[0] in ("services", *policies, JOBSETS):
            assert api.objects[key]["spec"] == obj["spec"], key
    assert k.status("exp1", "default", learner=False)["admission"] == "Queued"


def test_a_resize_back_to_one_learner_pod_removes_the_ranks_service(cluster) -> None:
    api, k, kueue = cluster
    kueue.admit()
    with pytest.raises(UsageError, match=r"learner_pods 3: the 1 learner ranks must spread evenly"):
        k.scale("exp1", "default", 4, learner_pods=3)
    assert not api.sent("patch") and not api.sent("delete")  # refused before anything changed

"""The kube launcher against an in-memory API server: what it sends, what it cleans up, and the
one-line error for each way a cluster says no."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_api import FakeApi, fake_client
from kube_support import make_spec

from surreal.orchestrator.kube import client as kube_mod
from surreal.orchestrator.kube import render as kr
from surreal.orchestrator.kube.client import (
    ClusterUnreachable,
    ExperimentExists,
    ExperimentNotFound,
    ImageNotSet,
    KubeClient,
    KubeError,
    NamespaceMissing,
    is_local_cluster,
)
from surreal.orchestrator.kube.errors import Forbidden
from surreal.orchestrator.launcher import UsageError
from surreal.protocol.server import LearnerServer


def launcher(api: FakeApi, context: str = "kind-surreal", **kwargs: Any) -> KubeClient:
    return KubeClient(fake_client(api), context=context, delete_timeout=2.0, **kwargs)


def pod(name: str, role: str, *, ready: bool = True, exp: str = "exp1", **container: Any) -> dict:
    state = container.pop("state", {"running": {}} if ready else {"waiting": {"reason": "ContainerCreating"}})
    status = {"name": role, "ready": ready, "restartCount": 0, "image": "i", "imageID": "",
              "state": state, **container}  # fmt: skip
    labels = {"app.kubernetes.io/name": "surreal", "surreal.io/experiment": exp, "surreal.io/component": role}
    return {"metadata": {"name": name, "namespace": "default", "labels": labels},
            "status": {"phase": "Running", "containerStatuses": [status]}}  # fmt: skip


# --- create --------------------------------------------------------------------------------


def test_create_sends_the_rendered_objects_root_first_then_owned_by_it() -> None:
    api = FakeApi()
    spec = make_spec(agents=4)
    created = launcher(api).create(spec, token="tok")
    expected = kr.render(spec, token="tok")
    sent = [r.body for r in api.sent("create")]
    assert sent[0] == expected[0]  # the root, as rendered
    root_uid = api.objects[("configmaps", "default", "exp1-spec")]["metadata"]["uid"]
    for body, obj in zip(sent[1:], expected[1:], strict=True):
        [ref] = body["metadata"].pop("ownerReferences")
        assert ref == {"apiVersion": "v1", "kind": "ConfigMap", "name": "exp1-spec",
                       "uid": root_uid, "blockOwnerDeletion": True}  # fmt: skip
        assert body == obj  # nothing lost or added on the way through the client's models
    assert [o["kind"] for o in created.objects] == [o["kind"] for o in expected]
    assert api.names("jobs.batch") == ["exp1-actor", "exp1-evaluator", "exp1-learner"]
    assert api.names("deployments.apps") == ["exp1-tensorboard"]


def test_create_generates_a_token_when_none_is_given() -> None:
    api = FakeApi()
    launcher(api).create(make_spec())
    token = api.sent("create")[1].body["stringData"]["token"]
    assert len(token) >= 40


@pytest.mark.parametrize(
    ("verb", "resource", "status", "error", "message"),
    [
        ("create", "jobs.batch", 500, KubeError, "cannot create jobs.batch: 500"),
        ("create", "networkpolicies.networking.k8s.io", 403, Forbidden,
         "may not create networkpolicies.networking.k8s.io in namespace 'default' (RBAC"),
        ("create", "services", 409, ExperimentExists, "Service 'exp1-learner' already exists"),
        # A Role the CLI may not grant (it lacks list on jobs itself): the components' watch.
        ("create", "roles.rbac.authorization.k8s.io", 403, Forbidden,
         "may not create roles.rbac.authorization.k8s.io in namespace 'default' (RBAC"),
    ],
)  # fmt: skip
def test_a_create_that_fails_midway_leaves_nothing(verb, resource, status, error, message) -> None:
    api = FakeApi()
    api.fail[(verb, resource)] = status
    with pytest.raises(error, match=message.replace("(", r"\(")):
        launcher(api).create(make_spec())
    assert len(api.sent("create")) > 2  # it did get midway
    assert api.objects == {}
    [delete] = api.sent("delete")
    assert delete.resource == "configmaps" and delete.query["propagationPolicy"] == "Foreground"


def test_a_failed_rollback_does_not_hide_the_first_error() -> None:
    api = FakeApi()
    api.fail[("create", "jobs.batch")] = 403
    api.fail[("delete", "configmaps")] = 500
    with pytest.raises(Forbidden, match="may not create jobs.batch"):
        launcher(api).create(make_spec())


def test_missing_namespace_is_named_and_nothing_is_created() -> None:
    api = FakeApi(namespaces=set())
    with pytest.raises(
        NamespaceMissing, match="namespace 'rl' does not exist .create it: kubectl create namespace rl"
    ):
        launcher(api).create(make_spec(namespace="rl"))
    assert api.sent("create") == []


def test_missing_namespace_is_found_even_when_namespaces_cannot_be_read() -> None:
    api = FakeApi(namespaces=set())
    api.fail[("get", "namespaces")] = 403  # a namespaced Role
    with pytest.raises(NamespaceMissing, match="'default' does not exist"):
        launcher(api).create(make_spec())
    assert api.objects == {}


def test_an_existing_experiment_is_refused_and_left_alone() -> None:
    api = FakeApi()
    launcher(api).create(make_spec())
    before = dict(api.objects)
    api.requests.clear()
    with pytest.raises(ExperimentExists, match="experiment 'exp1' already exists in namespace 'default'"):
        launcher(api).create(make_spec())
    assert api.sent("create") == [] and api.sent("delete") == [] and api.objects == before


def test_a_remote_cluster_needs_an_image() -> None:
    api = FakeApi()
    remote = KubeClient(fake_client(api, host="https://34.120.1.2"), context="gke_proj_zone_c")
    with pytest.raises(ImageNotSet, match="no --image for the remote cluster 'gke_proj_zone_c'"):
        remote.create(make_spec())
    assert api.requests == []
    remote.create(make_spec(image="ghcr.io/me/surreal:0.1"))
    assert api.names("jobs.batch") == ["exp1-actor", "exp1-evaluator", "exp1-learner"]


@pytest.mark.parametrize(
    ("context", "server", "local"),
    [
        ("kind-surreal", "https://127.0.0.1:40000", True),
        ("minikube", "https://192.168.49.2:8443", True),
        ("docker-desktop", "https://kubernetes.docker.internal:6443", True),
        (None, "https://localhost:6443", True),
        ("gke_p_z_c", "https://34.1.2.3", False),
        ("arn:aws:eks:us-east-1:1:cluster/x", "https://ABC.gr7.us-east-1.eks.amazonaws.com", False),
        (None, "https://10.96.0.1:443", False),  # in-cluster
    ],
)
def test_local_clusters_are_kind_minikube_and_loopback(context, server, local) -> None:
    assert is_local_cluster(context, server) is local


def test_an_unreachable_cluster_is_one_clear_line() -> None:
    api = FakeApi(unreachable=True)
    with pytest.raises(ClusterUnreachable) as info:
        launcher(api).create(make_spec())
    assert str(info.value).startswith("cannot reach the Kubernetes API at https://127.0.0.1:6443: ")
    assert "Connection refused" in str(info.value) and "\n" not in str(info.value)


def test_rejected_credentials_are_named() -> None:
    api = FakeApi()
    api.fail[("get", "namespaces")] = 401
    with pytest.raises(ClusterUnreachable, match="rejected the credentials"):
        launcher(api).create(make_spec())


def test_no_kubeconfig_and_no_pod_means_no_cluster(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nothing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ClusterUnreachable, match="no Kubernetes cluster configured: no kubeconfig at"):
        KubeClient.connect()


def test_an_unknown_context_lists_the_known_ones(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: kind-a\n"
        "clusters: [{name: a, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: a, user: {token: x}}]\n"
        "contexts: [{name: kind-a, context: {cluster: a, user: a}}]\n"
    )
    with pytest.raises(
        ClusterUnreachable, match=r"no context 'prod' in your kubeconfig \(contexts: kind-a\)"
    ):
        KubeClient.connect(context="prod", kubeconfig=str(config))
    connected = KubeClient.connect(kubeconfig=str(config))
    assert connected.context == "kind-a" and connected.local


# --- scale, delete, list, logs ----------------------------------------------------------------


@pytest.fixture
def running() -> tuple[FakeApi, KubeClient]:
    api = FakeApi()
    k = launcher(api)
    k.create(make_spec(agents=8, agents_per_pod=2), token="tok")
    return api, k


def test_scale_tells_the_learner_first_then_patches_the_actor_job(tmp_path) -> None:
    api, calls = FakeApi(), []

    def exec_(pod_name: str, ns: str, container: str, argv) -> bytes:
        # The command runs here as it would in the container, against a folder for the claim.
        calls.append((pod_name, container))
        target = tmp_path / Path(argv[3]).name
        subprocess.run([sys.executable, argv[1], argv[2], str(target), argv[4]], check=True)
        return b""

    k = launcher(api, exec_=exec_)
    k.create(make_spec(agents=8, agents_per_pod=2), token="tok")
    with pytest.raises(KubeError, match="learner pod is not ready"):
        k.scale("exp1", "default", 20)
    assert not api.sent("patch")  # nothing changed while the learner could not be told
    api.add("pods", pod("exp1-learner-0", "learner"))
    assert k.scale("exp1", "default", 20) == 10
    assert calls == [("exp1-learner-0", "learner")]
    assert json.loads((tmp_path / "scale.json").read_text()) == {"agents": 20}
    root, scale = api.sent("patch")
    # An elastic Indexed Job: completions and parallelism change together, in one patch.
    assert scale.resource == "jobs.batch" and scale.body == {"spec": {"completions": 10, "parallelism": 10}}
    job = api.objects[("jobs.batch", "default", "exp1-actor")]["spec"]
    assert job["completions"] == job["parallelism"] == 10
    assert k.list_experiments("default")[0]["agents"] == 20  # the root carries the new count
    with pytest.raises(UsageError, match=r"positive multiple of agents_per_pod \(2\), got 7"):
        k.scale("exp1", "default", 7)
    with pytest.raises(ExperimentNotFound, match="no experiment 'nope' in namespace 'default'"):
        k.scale("nope", "default", 4)


def test_delete_removes_everything_through_the_root(running) -> None:
    api, k = running
    k.delete("exp1", "default")
    assert api.objects == {}
    with pytest.raises(ExperimentNotFound):
        k.delete("exp1", "default")


def test_delete_refuses_a_helm_release(running) -> None:
    api, k = running
    api.objects[("configmaps", "default", "exp1-spec")]["metadata"]["labels"][
        "app.kubernetes.io/managed-by"
    ] = "Helm"
    with pytest.raises(KubeError, match="installed with Helm: `helm uninstall exp1 -n default`"):
        k.delete("exp1", "default")
    assert api.sent("delete") == []


def test_list_shows_each_experiment_with_its_phase(running) -> None:
    api, k = running
    api.add("pods", pod("exp1-learner-0", "learner"))
    [row] = k.list_experiments("default")
    assert row == {"name": "exp1", "namespace": "default", "algo": "ppo", "env": "CartPole-v1",
                   "agents": 8, "phase": "Running", "pods": 1, "managed_by": "surreal"}  # fmt: skip


def test_logs_of_a_role_a_numbered_actor_and_a_crashed_container(running) -> None:
    api, k = running
    api.add("pods", pod("exp1-learner-0", "learner"))
    api.add("pods", pod("exp1-actor-b", "actor"))
    api.add("pods", pod("exp1-actor-a", "actor"))
    api.logs[("exp1-learner-0", "learner")] = "step 1\nstep 2\n"
    api.logs[("exp1-actor-b", "actor")] = "actor b"
    assert list(k.logs("exp1", "default")) == ["step 1", "step 2"]
    assert list(k.logs("exp1", "default", "actor-1")) == ["actor b"]
    list(k.logs("exp1", "default", "exp1-actor-a", previous=True, tail=5))
    last = api.requests[-1]
    assert last.resource == "pods/log" and last.query["previous"] == "true" and last.query["tailLines"] == "5"
    api.fail[("get", "pods/log")] = 400
    with pytest.raises(KubeError, match="has no previous .crashed. container"):
        list(k.logs("exp1", "default", "learner", previous=True))
    with pytest.raises(KubeError, match="has 2 actor pod.s.; no 'actor-7'"):
        list(k.logs("exp1", "default", "actor-7"))


# --- status and tensorboard through a port-forward ----------------------------------------


def dial_to(port: int):
    return lambda pod_name, ns, pod_port: lambda: socket.create_connection(("127.0.0.1", port))


def test_status_reads_the_learner_through_a_port_forward(running) -> None:
    api, _ = running
    metrics = {"env_steps": 1234, "updates": 5, "policy_version": 5, "connected_actors": 4}
    server = LearnerServer(token="tok", experience_schema={}, status_provider=lambda: metrics)
    port = server.start()
    try:
        k = launcher(api, dial=dial_to(port))
        api.add("pods", pod("exp1-learner-0", "learner"))
        api.add("pods", pod("exp1-actor-a", "actor", ready=False))
        st = k.status("exp1", "default")
        assert st["phase"] == "Running" and st["backend"] == "kube" and st["learner_status"] == "ok"
        assert st["env_steps"] == 1234 and st["connected_actors"] == 4 and st["eval_return"] is None
        assert st["actor_pods"] == {"ready": 0, "total": 1}
        assert [c["name"] for c in st["components"]] == ["exp1-learner-0", "exp1-actor-a"]
        # A wrong token (e.g. a Secret replaced after the learner started) is reported, not raised.
        secret = api.objects[("secrets", "default", "exp1-token")]
        secret["data"]["token"] = "d3Jvbmc="
        st = k.status("exp1", "default")
        assert "UNAUTHENTICATED" in st["learner_status"] and st["env_steps"] is None
    finally:
        server.stop(grace=0)


def test_status_after_the_end_reads_the_jobs_and_the_learners_termination_message(running) -> None:
    api, k = running
    final = {"phase": "Succeeded", "exit_code": 0, "env_steps": 100_352, "updates": 49, "eval_return": 500.0}
    api.add("pods", pod("exp1-learner-0-abcde", "learner", ready=False, state={"terminated": {
        "exitCode": 0, "reason": "Completed", "message": json.dumps(final)}}))  # fmt: skip
    api.add("pods", pod("exp1-actor-0-fghij", "actor", ready=False,
                        state={"terminated": {"exitCode": 0, "reason": "Completed"}}))  # fmt: skip
    for name in ("exp1-learner", "exp1-actor", "exp1-evaluator"):  # what the Job controller reports
        api.objects[("jobs.batch", "default", name)]["status"] = {
            "succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}  # fmt: skip
    st = k.status("exp1", "default")
    assert st["phase"] == "Succeeded" and st["learner_status"] == "the learner pod is not ready"
    assert (st["env_steps"], st["updates"], st["eval_return"]) == (100_352, 49, 500.0)
    assert [(j["role"], j["state"]) for j in st["jobs"]] == [
        ("learner", "Complete"), ("actor", "Complete"), ("evaluator", "Complete")]  # fmt: skip
    assert {c["state"] for c in st["components"]} == {"Succeeded"}
    [row] = k.list_experiments("default")
    assert row["phase"] == "Succeeded"
    # A learner Job past its retries: the experiment failed, and status says why.
    api.objects[("jobs.batch", "default", "exp1-learner")]["status"] = {"failed": 6, "conditions": [
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
         "message": "Job has reached the specified backoff limit"}]}  # fmt: skip
    st = k.status("exp1", "default")
    assert st["phase"] == "Failed"
    assert st["problem"] == "exp1-learner: BackoffLimitExceeded: Job has reached the specified backoff limit"


def test_status_without_a_ready_learner_still_shows_the_pods(running) -> None:
    api, k = running
    api.add("pods", pod("exp1-learner-0", "learner", ready=False))
    st = k.status("exp1", "default")
    assert st["phase"] == "Pending" and st["learner_status"] == "the learner pod is not ready"
    assert (st["components"][0]["state"], st["components"][0]["detail"]) == ("Starting", "ContainerCreating")


def test_tensorboard_forwards_a_local_port_to_its_pod(running) -> None:
    api, _ = running
    with socket.create_server(("127.0.0.1", 0)) as fake_tb:
        k = launcher(api, dial=dial_to(fake_tb.getsockname()[1]))
        with pytest.raises(KubeError, match="no ready TensorBoard pod"):
            k.tensorboard("exp1", "default", local_port=0)
        api.add("pods", pod("exp1-tensorboard-x", "tensorboard"))
        with k.tensorboard("exp1", "default", local_port=0) as forward:
            with socket.create_connection(("127.0.0.1", forward.port)) as browser:
                conn, _ = fake_tb.accept()
                browser.sendall(b"GET / HTTP/1.0\r\n\r\n")
                assert conn.recv(100).startswith(b"GET /")
                conn.close()


def test_module_exports_the_errors() -> None:
    for name in ("ClusterUnreachable", "ExperimentExists", "ImageNotSet", "NamespaceMissing"):
        assert issubclass(getattr(kube_mod, name), KubeError)

"""The objects `surreal create --backend kube --dry-run` prints: valid, labelled, secured, sized."""

from __future__ import annotations

import copy
import json
from typing import Any

import kubernetes_validate
import pytest
import yaml
from jobset_schema import JobSetInvalid, validate
from kube_support import KUBE_VERSIONS, make_spec

from surreal.algorithms.registry import ALGORITHMS
from surreal.component import ComponentError, worker_index
from surreal.orchestrator.kube import output as ko
from surreal.orchestrator.kube import render as kr
from surreal.orchestrator.kube.pods import Placement
from surreal.orchestrator.policy import POLICIES
from surreal.orchestrator.program import replay_memory_mb
from surreal.runtime.exits import (
    EXIT_ALGORITHM_FAILED,
    EXIT_ENV_FAILED,
    EXIT_GROUP_NOT_FORMED,
    EXIT_LEARNER_GONE,
    EXIT_NO_ACTORS,
    EXIT_NOT_TRAINED,
    EXIT_PREEMPTED,
)

LABEL_KEYS = (
    "app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component",
    "app.kubernetes.io/managed-by", "surreal.io/experiment", "surreal.io/component",
)  # fmt: skip
SECURITY = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "runAsUser": 10001,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def pod_templates(objects: list[dict[str, Any]]) -> list[tuple[dict, dict]]:
    return [(o, o["spec"]["template"]) for o in objects if "template" in o.get("spec", {})]


def by_kind_name(objects: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


@pytest.fixture
def objects_512(algo: str) -> list[dict[str, Any]]:
    return kr.render(make_spec(algo=algo, agents=512), token="t")


def test_every_object_validates_strictly_against_kubernetes_1_29_to_1_33(objects_512) -> None:
    # Through YAML, as `kubectl apply -f -` would read the dry run.
    documents = list(yaml.safe_load_all(ko.to_yaml(objects_512)))
    assert documents == objects_512
    for version in KUBE_VERSIONS:
        for obj in documents:
            validate(obj, version)


def test_strict_validation_can_fail() -> None:
    obj = by_kind_name(kr.render(make_spec(), token="t"))[("Job", "exp1-learner")]
    obj["spec"]["template"]["spec"]["containers"][0]["cpuLimit"] = "1"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(obj, "1.33")


def test_the_kinds_and_names_of_an_experiment(objects_512, algo: str) -> None:
    # An off-policy algorithm's replay shards: their headless Service and NetworkPolicy, their Job.
    replay = "replay" in ALGORITHMS[algo].roles
    assert list(by_kind_name(objects_512)) == [
        ("ConfigMap", "exp1-spec"),
        ("Secret", "exp1-token"),
        ("NetworkPolicy", "exp1-learner"),
        ("ServiceAccount", "exp1-watch"),
        ("Role", "exp1-watch"),
        ("RoleBinding", "exp1-watch"),
        ("PersistentVolumeClaim", "exp1-data"),
        ("Service", "exp1-learner"),
        *([("Service", "exp1-replay"), ("NetworkPolicy", "exp1-replay")] if replay else []),
        ("PodDisruptionBudget", "exp1-learner"),
        ("Job", "exp1-learner"),
        *([("Job", "exp1-replay")] if replay else []),
        ("Job", "exp1-actor"),
        ("Job", "exp1-evaluator"),
        ("Service", "exp1-tensorboard"),
        ("Deployment", "exp1-tensorboard"),
    ]


def test_replay_shards_are_pods_with_stable_names_inside_the_one_queued_jobset() -> None:
    # surreal create exp1 --algo sac --env Pendulum-v1 --backend kube --dry-run -o yaml
    #   --replay-shards 2 --queue team-a
    spec = make_spec(algo="sac", agents=4, replay_shards=2, queue="team-a")
    objects = kr.render(spec, token="t")
    for obj in objects:
        for version in KUBE_VERSIONS:
            validate(obj, version)
    [jobset] = [o for o in objects if kr.QUEUE_LABEL in o["metadata"]["labels"]]
    assert not [o for o in objects if o["kind"] == "Job"]
    replicated = {r["name"]: r["template"]["spec"] for r in jobset["spec"]["replicatedJobs"]}
    assert list(replicated) == ["learner", "replay", "actor", "evaluator"]
    assert {"name": "replay-failed", "action": "FailJobSet", "targetReplicatedJobs": ["replay"]} in (
        jobset["spec"]["failurePolicy"]["rules"]
    )
    shards = replicated["replay"]
    assert shards["completionMode"] == "Indexed" and shards["completions"] == shards["parallelism"] == 2
    assert shards["backoffLimitPerIndex"] == POLICIES["replay"].retries  # a lost shard fails no other
    pod = shards["template"]["spec"]
    # Pod i of the Job <jobset>-replay-0 is <job>-<i>.exp1-replay through the headless Service.
    assert pod["subdomain"] == "exp1-replay"
    [service] = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == "exp1-replay"]
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {"surreal.io/experiment": "exp1", "surreal.io/component": "replay"}
    addr = "exp1-replay-0-0.exp1-replay:7000,exp1-replay-0-1.exp1-replay:7000"
    for part in replicated.values():  # every component finds every shard
        env = {e["name"]: e["value"] for e in part["template"]["spec"]["containers"][0]["env"]}
        assert env["SURREAL_REPLAY_ADDR"] == addr
    [container] = pod["containers"]
    assert container["ports"] == [{"name": "grpc", "containerPort": 7000, "protocol": "TCP"}]
    # Memory from capacity x transition bytes, each shard holding its half of the buffer.
    half = replay_memory_mb(spec)
    assert container["resources"]["requests"]["memory"] == f"{half}Mi"
    assert half < replay_memory_mb(make_spec(algo="sac", agents=4, replay_shards=1))
    # A shard saves its rows to the learner's claim on SIGTERM: mounted, on the learner's node.
    data = next(v for v in pod["volumes"] if v["name"] == "data")
    assert data == {"name": "data", "persistentVolumeClaim": {"claimName": "exp1-data"}}
    [term] = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["labelSelector"]["matchLabels"]["surreal.io/component"] == "learner"
    # Without a claim, nothing to share and no node to be on.
    plain = kr.render(spec, token="t", settings=kr.RenderSettings(storage="emptyDir"))
    [jobset] = [o for o in plain if o["kind"] == "JobSet"]
    pod = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == "replay")["template"]["spec"]
    assert "affinity" not in pod["template"]["spec"]
    assert {"name": "data", "emptyDir": {}} in pod["template"]["spec"]["volumes"]


def test_every_object_and_pod_template_carries_the_labels(objects_512) -> None:
    for obj in objects_512:
        labels = obj["metadata"]["labels"]
        assert set(LABEL_KEYS) <= set(labels), obj["metadata"]["name"]
        assert labels["app.kubernetes.io/name"] == "surreal"
        assert labels["surreal.io/experiment"] == labels["app.kubernetes.io/instance"] == "exp1"
        assert labels["surreal.io/component"] == labels["app.kubernetes.io/component"]
        assert obj["metadata"]["namespace"] == "default"
    for obj, template in pod_templates(objects_512):
        assert template["metadata"]["labels"] == obj["metadata"]["labels"]
        # Selectors match the template, or the API server rejects the workload (a Job's selector
        # is the API server's own).
        if obj["kind"] != "Job":
            assert obj["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()


def test_every_container_has_requests_limits_and_the_security_settings(objects_512) -> None:
    for obj, template in pod_templates(objects_512):
        pod = template["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        # A token only where the component watches its Jobs (TensorBoard holds none).
        watches = obj["kind"] == "Job"
        assert pod["automountServiceAccountToken"] is watches
        assert pod.get("serviceAccountName") == ("exp1-watch" if watches else None)
        for container in pod["containers"]:
            where = f"{obj['metadata']['name']}/{container['name']}"
            resources = container["resources"]
            assert {"cpu", "memory"} <= set(resources["requests"]), where
            assert {"cpu", "memory"} <= set(resources["limits"]), where
            assert SECURITY.items() <= container["securityContext"].items(), where
            # A read-only root needs a writable /tmp.
            mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
            assert "/tmp" in mounts and not mounts["/tmp"].get("readOnly"), where


def test_actor_capacity_equals_the_agents(objects_512) -> None:
    actors = by_kind_name(objects_512)[("Job", "exp1-actor")]
    env = {e["name"]: e.get("value") for e in actors["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert actors["spec"]["parallelism"] * int(env["SURREAL_AGENTS_IN_WORKER"]) == 512


@pytest.mark.parametrize(("agents", "per_pod", "replicas"), [(512, 1, 512), (512, 8, 64), (12, 4, 3)])
def test_actor_replicas_pack_agents_per_pod(agents: int, per_pod: int, replicas: int) -> None:
    objects = kr.render(make_spec(agents=agents, agents_per_pod=per_pod), token="t")
    actors = by_kind_name(objects)[("Job", "exp1-actor")]
    # Every index runs at once (an elastic Indexed Job: scale patches both together).
    assert actors["spec"]["parallelism"] == actors["spec"]["completions"] == replicas
    env = actors["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "SURREAL_AGENTS_IN_WORKER", "value": str(per_pod)} in env


def test_agents_that_do_not_fill_whole_pods_are_rejected() -> None:
    with pytest.raises(kr.RenderError, match=r"agents \(10\) must be a multiple of agents_per_pod \(4\)"):
        kr.render(make_spec(agents=10, agents_per_pod=4), token="t")
    with pytest.raises(kr.RenderError, match="use --agents 8 or 12"):
        kr.render(make_spec(agents=10, agents_per_pod=4), token="t")


def test_a_pod_whose_fragments_exceed_the_message_limit_is_refused() -> None:
    """20 Breakout agents to a pod send 70 MiB fragments (4 stacked 84x84 frames per step), over
    the protocol's 64 MiB limit; 10 to a pod fit."""
    atari = {"env": "ALE/Breakout-v5", "agents": 20}
    with pytest.raises(kr.RenderError, match=r"a worker of 20 agents would send fragments of 70 MiB.*"
                       r"agents_per_pod \(20\)"):  # fmt: skip
        kr.render(make_spec(**atari, agents_per_pod=20), token="t")
    kr.render(make_spec(**atari, agents_per_pod=10), token="t")


def test_containers_run_exactly_the_program_argv_and_env() -> None:
    spec = make_spec(agents=3)
    objects = by_kind_name(kr.render(spec, token="t"))
    program = kr.kube_program(spec)
    for kind, name, component in [
        ("Job", "exp1-learner", "learner"),
        ("Job", "exp1-actor", "actor-0"),
        ("Job", "exp1-evaluator", "evaluator"),
    ]:
        c = program.component(component)
        container = objects[(kind, name)]["spec"]["template"]["spec"]["containers"][0]
        assert [*container["command"], *container["args"]] == list(c.argv)
        assert {e["name"]: e["value"] for e in container["env"]} == dict(c.env)
    # The learner's address is its Service, in the pods' own namespace; the token is a file.
    assert program.component("learner").env["SURREAL_LEARNER_ADDR"] == "exp1-learner:6000"
    assert "SURREAL_TOKEN" not in program.component("actor-0").env


def test_actor_pods_take_their_worker_index_from_the_indexed_job(monkeypatch) -> None:
    actors = by_kind_name(kr.render(make_spec(), token="t"))[("Job", "exp1-actor")]
    assert actors["spec"]["completionMode"] == "Indexed"
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "17")  # what Kubernetes sets in pod 17
    assert worker_index("actor", 0) == 17 and worker_index("learner", 0) == 0
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "x")
    with pytest.raises(ComponentError, match="JOB_COMPLETION_INDEX"):
        worker_index("actor", 0)


@pytest.mark.parametrize("role", ["learner", "actor", "evaluator"])
def test_every_component_runs_to_completion_and_disruptions_are_not_failures(role: str) -> None:
    job = by_kind_name(kr.render(make_spec(), token="t"))[("Job", f"exp1-{role}")]
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"  # no container of a finished run is restarted
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert rules[0] == {
        "action": "Ignore",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
    }
    assert rules[1]["action"] == "Ignore" and rules[1]["onExitCodes"]["values"] == [EXIT_PREEMPTED]
    container = pod["containers"][0]
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    # A worker whose learner is gone for good, a learner whose ranks did not form their group or
    # that no actor is left to feed, and any whose environment failed, fail their Job instead of
    # retrying.
    fatal = [EXIT_GROUP_NOT_FORMED, EXIT_NO_ACTORS] if role == "learner" else [EXIT_LEARNER_GONE]
    fatal.append(EXIT_ENV_FAILED)
    fatal += [EXIT_NOT_TRAINED, EXIT_ALGORITHM_FAILED] if role == "learner" else [EXIT_ALGORITHM_FAILED]
    assert rules[2:] == [{"action": "FailJob", "onExitCodes": {
        "containerName": role, "operator": "In", "values": fatal}}]  # fmt: skip
    # Every component watches the Job it depends on (orchestrator/kube/watch.py).
    assert {"name": "SURREAL_JOBS_WATCH", "value": "kube:default/exp1"} in container["env"]
    assert pod["serviceAccountName"] == "exp1-watch" and pod["automountServiceAccountToken"] is True
    if role == "learner":
        assert job["spec"]["backoffLimit"] == POLICIES["learner"].retries
        assert pod["terminationGracePeriodSeconds"] == kr.LEARNER_GRACE_SECONDS
        assert {"name": "SURREAL_TERMINATION_LOG", "value": "/dev/termination-log"} in container["env"]
    if role == "actor":  # one crashing actor spends its own retries, fails nothing else
        assert (
            job["spec"]["backoffLimitPerIndex"] == POLICIES["actor"].retries
            and "backoffLimit" not in job["spec"]
        )


def test_a_budget_keeps_voluntary_evictions_off_the_running_learner() -> None:
    pdb = by_kind_name(kr.render(make_spec(), token="t"))[("PodDisruptionBudget", "exp1-learner")]
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == {
        "surreal.io/experiment": "exp1",
        "surreal.io/component": "learner",
    }
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"  # a stuck learner never blocks a drain


def test_a_queue_makes_the_jobs_one_jobset_the_only_object_kueue_admits() -> None:
    spec = make_spec(agents=4, learners=2, queue="team-a")
    objects = kr.render(spec, token="t")
    plain = by_kind_name(kr.render(make_spec(agents=4, learners=2), token="t"))
    assert not [o for o in objects if o["kind"] == "Job"]
    [jobset] = [o for o in objects if kr.QUEUE_LABEL in o["metadata"]["labels"]]
    assert jobset["kind"] == "JobSet" and jobset["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    assert jobset["metadata"]["name"] == "exp1" and jobset["metadata"]["labels"][kr.QUEUE_LABEL] == "team-a"
    assert jobset["spec"]["suspend"] is True  # Kueue unsuspends it once admitted
    # Each replicated Job is the plain Job of its role, unsuspended (the JobSet's suspend is theirs).
    replicated = {r["name"]: r for r in jobset["spec"]["replicatedJobs"]}
    assert list(replicated) == list(kr.JOB_ROLES)
    for role, rjob in replicated.items():
        job = plain[("Job", f"exp1-{role}")]
        assert rjob["replicas"] == 1
        env = {"name": "SURREAL_JOBS_WATCH", "value": "kube:default/exp1"}
        plain_env = job["spec"]["template"]["spec"]["containers"][0]["env"]
        plain_env[plain_env.index(env)] = {**env, "value": "kube:default/exp1/jobset"}
        assert rjob["template"] == {"metadata": {"labels": job["metadata"]["labels"]}, "spec": job["spec"]}
    assert replicated["actor"]["template"]["spec"]["parallelism"] == 4
    # It succeeds with the learner; policy.py says what a failed Job means for the experiment.
    assert jobset["spec"]["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["learner"]}
    rules = {r["targetReplicatedJobs"][0]: r["action"] for r in jobset["spec"]["failurePolicy"]["rules"]}
    assert rules == {"learner": "FailJobSet", "actor": "FailJobSet",
                     "evaluator": "RestartJobSetAndIgnoreMaxRestarts"}  # fmt: skip
    assert jobset["spec"]["failurePolicy"]["maxRestarts"] == 0
    # The components watch the Jobs the JobSet controller names; nothing else changes but TensorBoard,
    # which holds no pod until asked.
    [role] = [o for o in objects if o["kind"] == "Role"]
    assert role["rules"][0]["resourceNames"] == ["exp1-learner-0", "exp1-actor-0"]
    for rjob in replicated.values():
        env = rjob["template"]["spec"]["template"]["spec"]["containers"][0]["env"]
        assert {"name": "SURREAL_JOBS_WATCH", "value": "kube:default/exp1/jobset"} in env
    [tb] = [o for o in objects if o["kind"] == "Deployment"]
    assert tb["spec"]["replicas"] == 0 and plain[("Deployment", "exp1-tensorboard")]["spec"]["replicas"] == 1
    same = {
        k: o
        for k, o in by_kind_name(objects).items()
        if k[0] not in ("JobSet", "Role", "Deployment", "ConfigMap")
    }
    assert same == {k: o for k, o in plain.items() if k[0] not in ("Job", "Role", "Deployment", "ConfigMap")}
    for version in KUBE_VERSIONS:
        for obj in objects:
            validate(obj, version)
    plain_jobs = [o for o in plain.values() if o["kind"] == "Job"]
    assert all("suspend" not in j["spec"] and "kueue" not in str(j) for j in plain_jobs)


def test_the_jobset_validation_can_fail() -> None:
    [jobset] = [o for o in kr.render(make_spec(queue="team-a"), token="t") if o["kind"] == "JobSet"]
    broken = copy.deepcopy(jobset)
    broken["spec"]["failurePolicy"]["rules"][0]["action"] = "Ignore"  # no such JobSet action
    with pytest.raises(JobSetInvalid, match="action"):
        validate(broken, "1.33")
    broken = copy.deepcopy(jobset)
    broken["spec"]["sucessPolicy"] = broken["spec"].pop("successPolicy")  # a typo: strict
    with pytest.raises(JobSetInvalid, match="sucessPolicy"):
        validate(broken, "1.33")
    broken = copy.deepcopy(jobset)
    broken["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["containers"][0]["cpu"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):  # a Job template, checked as a Job
        validate(broken, "1.33")
    broken = copy.deepcopy(jobset)
    broken["spec"]["successPolicy"]["targetReplicatedJobs"] = ["learners"]
    with pytest.raises(JobSetInvalid, match="learners"):
        validate(broken, "1.33")


def test_the_spec_config_map_is_the_spec_with_backend_and_image_filled() -> None:
    spec = make_spec(agents=4)
    cm = kr.render(spec, token="t")[0]
    data = yaml.safe_load(cm["data"]["spec.yaml"])
    assert data["backend"] == "kube" and data["image"] == kr.DEFAULT_IMAGE
    assert data["ppo"] == spec.to_dict()["ppo"]


def test_the_token_is_a_secret_and_required() -> None:
    secret = kr.render(make_spec(), token="s3cret")[1]
    assert secret["stringData"] == {"token": "s3cret"}
    with pytest.raises(kr.RenderError, match="empty token"):
        kr.render(make_spec(), token="")
    assert kr.new_token() != kr.new_token() and len(kr.new_token()) >= 40


def test_learner_probes_use_grpc_health_and_the_service_names_the_port() -> None:
    objects = by_kind_name(kr.render(make_spec(), token="t"))
    container = objects[("Job", "exp1-learner")]["spec"]["template"]["spec"]["containers"][0]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"] == {"port": 6000}
    service = objects[("Service", "exp1-learner")]
    assert service["spec"]["ports"] == [
        {"name": "grpc", "port": 6000, "targetPort": "grpc", "protocol": "TCP"}
    ]
    assert service["spec"]["type"] == "ClusterIP"


def test_only_the_experiments_pods_reach_the_learner() -> None:
    policy = by_kind_name(kr.render(make_spec(), token="t"))[("NetworkPolicy", "exp1-learner")]
    assert policy["spec"]["podSelector"]["matchLabels"] == {
        "surreal.io/experiment": "exp1",
        "surreal.io/component": "learner",
    }
    [rule] = policy["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {"surreal.io/experiment": "exp1"}}}]
    assert rule["ports"] == [{"protocol": "TCP", "port": 6000}]


def test_learner_ranks_run_in_the_learner_pod_each_on_its_own_port() -> None:
    """`--learners 3`: one learner pod (the elastic agent and its ranks) sized for three, a port per
    rank named in the container, the Service and the NetworkPolicy, and every component told each
    rank's address; actor pods reach rank index % 3 through it."""
    objects = by_kind_name(kr.render(make_spec(agents=6, learners=3), token="t"))
    job = objects[("Job", "exp1-learner")]
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 1
    container = job["spec"]["template"]["spec"]["containers"][0]
    ports = [(p["name"], p["containerPort"]) for p in container["ports"]]
    assert ports == [("grpc", 6000), ("grpc-1", 6001), ("grpc-2", 6002)]
    assert container["startupProbe"]["grpc"] == {"port": 6000}  # rank 0: up once the group formed
    assert container["resources"]["limits"] == {"cpu": "3", "memory": "6144Mi"}
    service = objects[("Service", "exp1-learner")]
    assert [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [
        ("grpc", 6000, "grpc"), ("grpc-1", 6001, "grpc-1"), ("grpc-2", 6002, "grpc-2")]  # fmt: skip
    [rule] = objects[("NetworkPolicy", "exp1-learner")]["spec"]["ingress"]
    assert [p["port"] for p in rule["ports"]] == [6000, 6001, 6002]
    addr = "exp1-learner:6000,exp1-learner:6001,exp1-learner:6002"
    for (kind, _), obj in objects.items():
        if kind == "Job":
            env = {e["name"]: e["value"] for e in obj["spec"]["template"]["spec"]["containers"][0]["env"]}
            assert env["SURREAL_LEARNER_ADDR"] == addr
    for version in KUBE_VERSIONS:
        for obj in objects.values():
            validate(obj, version)


def test_learner_ranks_need_an_actor_pod_each() -> None:
    with pytest.raises(kr.RenderError, match="3 learner ranks need an actor pod each, and there would be 2"):
        kr.render(make_spec(agents=4, agents_per_pod=2, learners=3), token="t")


def test_shm_is_memory_and_the_exp_dir_is_writable_scratch_for_actors() -> None:
    objects = by_kind_name(kr.render(make_spec(), token="t"))
    pod = objects[("Job", "exp1-actor")]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["shm"]["emptyDir"]["medium"] == "Memory"
    assert volumes["data"] == {"name": "data", "emptyDir": {}}


def test_learner_keeps_checkpoints_on_a_claim_that_tensorboard_reads() -> None:
    objects = by_kind_name(kr.render(make_spec(), token="t"))
    learner = objects[("Job", "exp1-learner")]["spec"]
    assert learner["completions"] == learner["parallelism"] == 1
    volumes = {v["name"]: v for v in learner["template"]["spec"]["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"] == {"claimName": "exp1-data"}
    # The claim is its own object, owned by the root: a restarted learner pod finds its
    # checkpoints, a finished run keeps them for TensorBoard, `delete` removes them.
    claim = objects[("PersistentVolumeClaim", "exp1-data")]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    tb = objects[("Deployment", "exp1-tensorboard")]["spec"]["template"]["spec"]
    volume = {v["name"]: v for v in tb["volumes"]}["data"]["persistentVolumeClaim"]
    assert volume == {"claimName": "exp1-data", "readOnly": True}
    [term] = tb["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["labelSelector"]["matchLabels"]["surreal.io/component"] == "learner"


def test_empty_dir_storage_has_no_claim_and_no_tensorboard() -> None:
    settings = kr.RenderSettings(storage="emptyDir")
    objects = by_kind_name(kr.render(make_spec(), token="t", settings=settings))
    learner = objects[("Job", "exp1-learner")]["spec"]
    assert {"name": "data", "emptyDir": {}} in learner["template"]["spec"]["volumes"]
    assert not [k for k in objects if k[1] == "exp1-tensorboard" or k[0] == "PersistentVolumeClaim"]


def test_gpus_and_placement_reach_the_learner_and_its_tensorboard() -> None:
    taint = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    placement = {
        "learner": Placement({"surreal.io/pool": "gpu"}, [taint]),
        "actor": Placement({"surreal.io/pool": "cpu"}),
    }
    objects = by_kind_name(kr.render(make_spec(gpu=2), placement, token="t"))
    learner = objects[("Job", "exp1-learner")]["spec"]["template"]["spec"]
    resources = learner["containers"][0]["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == resources["requests"]["nvidia.com/gpu"] == "2"
    assert learner["nodeSelector"] == {"surreal.io/pool": "gpu"} and learner["tolerations"] == [taint]
    actor = objects[("Job", "exp1-actor")]["spec"]["template"]["spec"]
    assert actor["nodeSelector"] == {"surreal.io/pool": "cpu"} and "tolerations" not in actor
    assert "nvidia.com/gpu" not in actor["containers"][0]["resources"]["limits"]
    tb = objects[("Deployment", "exp1-tensorboard")]["spec"]["template"]["spec"]
    assert tb["tolerations"] == [taint] and "nvidia.com/gpu" not in str(tb["containers"])
    for version in ("1.29", "1.33"):
        for obj in objects.values():
            validate(obj, version)


def test_without_gpus_nothing_asks_for_one() -> None:
    assert "nvidia.com/gpu" not in ko.to_yaml(kr.render(make_spec(), token="t"))


def test_bad_settings_and_placements_are_named() -> None:
    with pytest.raises(kr.RenderError, match="storage must be"):
        kr.RenderSettings(storage="nfs")
    with pytest.raises(kr.RenderError, match="unknown roles"):
        kr.render(make_spec(), {"gpu-pool": Placement()}, token="t")


def test_resource_overrides_replace_a_roles_sizes() -> None:
    big = {"requests": {"cpu": "4", "memory": "8Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}}
    settings = kr.RenderSettings(resources={"learner": big})
    objects = by_kind_name(kr.render(make_spec(), token="t", settings=settings))
    learner = objects[("Job", "exp1-learner")]["spec"]["template"]["spec"]["containers"][0]
    assert learner["resources"] == big


def test_yaml_output_has_no_anchors_and_the_spec_reads_as_a_block() -> None:
    text = ko.to_yaml(kr.render(make_spec(), token="t"))
    assert "&id" not in text and "*id" not in text
    assert "spec.yaml: |\n    name: exp1\n" in text


def test_the_longest_experiment_name_keeps_every_derived_name_valid() -> None:
    name = "e" * 40
    objects = kr.render(make_spec(name), token="t")
    for obj in objects:
        validate(obj, "1.33")
    # An Indexed Job's pod has the hostname JOB-INDEX, at most 63 characters: the longest job
    # name with the largest index a Job may have (completions up to 100,000).
    for obj in objects:
        if obj["kind"] == "Job":
            assert len(obj["metadata"]["name"]) + len("-99999") <= 63


def test_dry_run_outputs() -> None:
    spec = make_spec(agents=4)
    as_json = json.loads(ko.dry_run(spec, "json", token="t"))
    assert as_json["kind"] == "List" and as_json["items"] == kr.render(spec, token="t")
    assert list(yaml.safe_load_all(ko.dry_run(spec, "yaml", token="t"))) == as_json["items"]
    values = yaml.safe_load(ko.dry_run(spec, "helm-values", token="t"))
    assert values["agents"] == 4 and values["config"] == spec.to_dict()["ppo"]
    with pytest.raises(kr.RenderError, match="unknown output 'xml'"):
        ko.dry_run(spec, "xml", token="t")


def test_many_agents_render_in_one_pass_over_the_actors(monkeypatch: pytest.MonkeyPatch) -> None:
    """20,000 actor pods (not timed): each component is built once, the names are checked in one
    pass through a set (tests/orchestrator: no comparison between distinct names), each actor's
    env is compared once with the others', and the output is the one actor Job whatever the count."""
    from surreal.orchestrator import program as components

    agents = 20_000
    counts = {"built": 0, "env_compared": 0}
    checked: list[int] = []
    post_init, env_eq, duplicates = (components.Component.__post_init__, components.FrozenEnv.__eq__,
                                     components.duplicate_names)  # fmt: skip

    def built(self: components.Component) -> None:
        counts["built"] += 1
        post_init(self)

    def env_compared(self: components.FrozenEnv, other: object) -> bool:
        counts["env_compared"] += 1
        return env_eq(self, other)

    def names_checked(names: Any) -> list[str]:
        names = list(names)
        checked.append(len(names))
        return duplicates(names)

    monkeypatch.setattr(components.Component, "__post_init__", built)
    monkeypatch.setattr(components.FrozenEnv, "__eq__", env_compared)
    monkeypatch.setattr(components, "duplicate_names", names_checked)
    objects = list(yaml.safe_load_all(ko.dry_run(make_spec(agents=agents), "yaml", token="t")))
    assert counts["built"] == agents + 3  # learner, evaluator, the actors' template, each actor
    assert checked == [agents + 2]  # one program, checked once
    assert counts["env_compared"] <= agents  # the actors alike: each against the first one's
    actors = by_kind_name(objects)[("Job", "exp1-actor")]
    assert actors["spec"]["completions"] == actors["spec"]["parallelism"] == agents
    assert len(objects) == len(kr.render(make_spec(agents=4), token="t"))


def test_the_components_may_list_their_two_jobs_by_name_and_nothing_else() -> None:
    objects = by_kind_name(kr.render(make_spec(namespace="rl"), token="t"))
    account = objects[("ServiceAccount", "exp1-watch")]
    assert account["automountServiceAccountToken"] is False  # only the pods that watch mount it
    [rule] = objects[("Role", "exp1-watch")]["rules"]
    assert rule == {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list"],
                    "resourceNames": ["exp1-learner", "exp1-actor"]}  # fmt: skip
    binding = objects[("RoleBinding", "exp1-watch")]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "exp1-watch",
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "exp1-watch", "namespace": "rl"}]
    env = objects[("Job", "exp1-actor")]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "SURREAL_JOBS_WATCH", "value": "kube:rl/exp1"} in env


def test_learner_ranks_across_pods_are_two_learner_jobs_with_stable_names() -> None:
    """--learners 4 --learner-pods 2: the learner Job (pod 0: the claim, the control store) and its
    peers' Indexed Job (pods 1..), both with `subdomain` NAME-ranks, a headless Service of that name
    that also resolves pods not ready yet, every rank addressed at its pod's name, and the learner
    pods open to each other (gloo's ports are its own)."""
    objects = by_kind_name(kr.render(make_spec(agents=4, learners=4, learner_pods=2), token="t"))
    learner, peers = objects[("Job", "exp1-learner")], objects[("Job", "exp1-learner-peers")]
    assert learner["spec"]["completions"] == 1 and peers["spec"]["completions"] == 1
    assert peers["spec"]["template"]["metadata"]["labels"]["surreal.io/component"] == "learner"
    assert peers["spec"]["backoffLimit"] == learner["spec"]["backoffLimit"]
    pods = [job["spec"]["template"]["spec"] for job in (learner, peers)]
    assert all(pod["subdomain"] == "exp1-ranks" for pod in pods)
    claims = [[v for v in pod["volumes"] if v["name"] == "data"][0] for pod in pods]
    assert claims[0] == {"name": "data", "persistentVolumeClaim": {"claimName": "exp1-data"}}
    assert claims[1] == {"name": "data", "emptyDir": {}}  # pod 0 alone checkpoints
    envs = [{e["name"]: e["value"] for e in pod["containers"][0]["env"]} for pod in pods]
    hosts = ["exp1-learner-0.exp1-ranks", "exp1-learner-peers-0.exp1-ranks"]
    assert envs[0]["SURREAL_LEARNER_ADDR"] == ",".join(f"{h}:{p}" for h in hosts for p in (6000, 6001))
    assert envs[0]["SURREAL_RANKS_CONTROL"] == envs[1]["SURREAL_RANKS_CONTROL"] == f"{hosts[0]}:29400"
    assert envs[0]["SURREAL_LEARNER_PODS"] == envs[1]["SURREAL_LEARNER_PODS"] == "2"
    assert "SURREAL_LEARNER_POD" not in envs[0] and envs[1]["SURREAL_LEARNER_POD"] == "1"
    for pod in pods:  # two ranks a pod: two cores, two learners' memory, a port each and the store's
        container = pod["containers"][0]
        assert container["resources"]["limits"]["cpu"] == "2"
        assert [p["containerPort"] for p in container["ports"]] == [6000, 6001, 29400]
    ranks = objects[("Service", "exp1-ranks")]["spec"]
    assert ranks["clusterIP"] == "None" and ranks["publishNotReadyAddresses"] is True
    assert ranks["selector"] == {"surreal.io/experiment": "exp1", "surreal.io/component": "learner"}
    ingress = objects[("NetworkPolicy", "exp1-learner")]["spec"]["ingress"]
    assert ingress[1] == {"from": [{"podSelector": {"matchLabels": ranks["selector"]}}]}
    assert objects[("PodDisruptionBudget", "exp1-learner")]["spec"]["minAvailable"] == 2
    for version in KUBE_VERSIONS:
        for obj in objects.values():
            validate(obj, version)
    # One learner pod: as before, no peers, no headless Service, no subdomain.
    plain = by_kind_name(kr.render(make_spec(agents=4, learners=4), token="t"))
    assert ("Job", "exp1-learner-peers") not in plain and ("Service", "exp1-ranks") not in plain
    assert "subdomain" not in plain[("Job", "exp1-learner")]["spec"]["template"]["spec"]


def test_queued_learner_pods_are_replicated_jobs_of_the_one_jobset() -> None:
    """The issue's dry run: `--learners 4 --learner-pods 2 --queue team-a`: exactly one object
    carries the queue label, the JobSet, whose Jobs name the learner pods as JobSet names them."""
    objects = kr.render(make_spec(agents=4, learners=4, learner_pods=2, queue="team-a"), token="t")
    [labelled] = [o for o in objects if kr.QUEUE_LABEL in o["metadata"]["labels"]]
    assert labelled["kind"] == "JobSet"
    names = [r["name"] for r in labelled["spec"]["replicatedJobs"]]
    assert names == ["learner", "learner-peers", "actor", "evaluator"]
    rules = {r["targetReplicatedJobs"][0]: r["action"] for r in labelled["spec"]["failurePolicy"]["rules"]}
    assert rules["learner-peers"] == "FailJobSet"
    pod = labelled["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    env = pod["containers"][0]["env"]
    addr = {e["name"]: e["value"] for e in env}["SURREAL_LEARNER_ADDR"]
    assert addr.split(",")[2] == "exp1-learner-peers-0-0.exp1-ranks:6000"  # <jobset>-<rjob>-<job>-<pod>
    for version in KUBE_VERSIONS:
        for obj in objects:
            validate(obj, version)

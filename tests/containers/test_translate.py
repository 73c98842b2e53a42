"""Every mapping of the container harness, from rendered objects to `run` flags. Pure: no engine."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from image_build import pip_config_mounts, source_hash

from surreal.orchestrator.containers import plan as containers_plan
from surreal.orchestrator.containers import run as containers_run
from surreal.orchestrator.kube.render import render
from surreal.spec import build_spec

WORK = Path("/w")


def objects(name: str = "t1", algo: str = "ppo", **flags: Any) -> list[dict[str, Any]]:
    overrides = flags.pop("overrides", None)
    spec = build_spec(name, flags={"algo": algo, "backend": "kube", **flags}, overrides=overrides)
    return render(spec, token="tok-123")


def plan(objs: list[dict[str, Any]] | None = None) -> containers_plan.Plan:
    return containers_plan.translate(
        objs or objects(agents=4, overrides={"agents_per_pod": 2}),
        workdir=WORK,
        run_id="r1",
        rng=lambda n: "x" * n,
    )


def flag_values(pod: containers_plan.PodRun, flag: str) -> list[str]:
    return [pod.args[i + 1] for i, a in enumerate(pod.args) if a == flag]


def env(pod: containers_plan.PodRun) -> dict[str, str]:
    return dict(v.split("=", 1) for v in flag_values(pod, "--env"))


def test_one_container_per_pod_and_replicas_as_the_workloads_ask() -> None:
    p = plan()
    assert [(pod.role, pod.name, pod.index) for pod in p.pods] == [
        ("learner", "t1-learner-0-xxxxx", 0),  # an Indexed Job's pod: NAME-INDEX-<5 random>
        ("actor", "t1-actor-0-xxxxx", 0),
        ("actor", "t1-actor-1-xxxxx", 1),
        ("evaluator", "t1-evaluator-0-xxxxx", 0),
        ("tensorboard", p.pods[4].name, 0),
    ]
    assert p.pods[4].name.startswith("t1-tensorboard-") and p.pods[4].name.endswith("-xxxxx")
    assert p.network == "surreal-r1" and p.experiment == "t1" and p.spec["agents"] == 4


def test_no_pod_gets_the_clusters_api_its_watch_token_or_account() -> None:
    # No API server here: the run's Job controller ends what the watch would (watch.py).
    objs = objects(agents=4, overrides={"agents_per_pod": 2})
    assert {"ServiceAccount", "Role", "RoleBinding"} <= {o["kind"] for o in objs}
    for pod in plan(objs).pods:
        assert "SURREAL_JOBS_WATCH" not in env(pod), pod.name
        assert not any("serviceaccount" in a.lower() for a in pod.args), pod.name


def test_jobs_carry_their_failure_policy_and_replacements_their_index() -> None:
    p = plan()
    learner, actor, evaluator = p.jobs
    assert (learner.name, learner.completions, learner.backoff_limit) == ("t1-learner", 1, 5)
    assert learner.ignore_exit_codes == (143,) and learner.fail_exit_codes == (70, 71, 73, 74, 75)
    assert (actor.completions, actor.backoff_limit, actor.backoff_per_index) == (2, None, 5)
    assert actor.fail_exit_codes == (69, 73, 75) and evaluator.fail_exit_codes == (69, 73, 75)
    again = containers_plan.job_pod(p, "t1-actor", 1, rng=lambda n: "y" * n)
    assert again.name == "t1-actor-1-yyyyy" and env(again)["JOB_COMPLETION_INDEX"] == "1"
    assert again.args == tuple(a.replace("t1-actor-1-xxxxx", "t1-actor-1-yyyyy") for a in p.pods[2].args)
    assert containers_plan.plan_from_dict(containers_plan.plan_to_dict(p)) == p


def test_the_learners_grace_period_and_termination_message_file() -> None:
    learner, actor = plan().pods[:2]
    assert learner.grace_seconds == 30 and actor.grace_seconds == containers_plan.DEFAULT_GRACE_SECONDS
    assert learner.termination_log == f"{WORK}/pods/t1-learner-0-xxxxx/termination-log"
    assert f"{learner.termination_log}:/dev/termination-log:rw" in flag_values(learner, "--volume")


def test_argv_is_the_containers_command_and_args() -> None:
    obj = objects()
    learner = next(o for o in obj if o["kind"] == "Job")["spec"]["template"]["spec"]["containers"][0]
    pod = plan(obj).pods[0]
    assert flag_values(pod, "--entrypoint") == learner["command"][:1]
    assert list(pod.command) == learner["command"][1:] + learner["args"]
    assert pod.image == "surreal:local"


def test_env_values_the_downward_api_pod_name_and_the_job_index() -> None:
    p = plan()
    learner, actor = p.pods[0], p.pods[2]
    assert env(learner)["SURREAL_LEARNER_ADDR"] == "t1-learner:6000"
    assert env(learner)["SURREAL_TOKEN_FILE"] == "/var/run/secrets/surreal/token"
    assert env(actor)["JOB_COMPLETION_INDEX"] == "1"  # what Kubernetes sets in an Indexed Job's pod
    assert env(actor)["SURREAL_AGENTS_IN_WORKER"] == "2"
    assert flag_values(actor, "--hostname") == [actor.name]
    pod_name = {"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    assert containers_plan.env_flags({"env": [pod_name]}, "p-1", "ns") == ["--env", "X=p-1"]


def test_services_become_network_aliases_of_the_pods_they_select() -> None:
    p = plan()
    assert flag_values(p.pods[0], "--network-alias") == ["t1-learner"]
    assert flag_values(p.pods[4], "--network-alias") == ["t1-tensorboard"]
    assert all(not flag_values(pod, "--network-alias") for pod in p.pods[1:4])
    assert all(flag_values(pod, "--network") == ["surreal-r1"] for pod in p.pods)


def test_learner_pods_are_named_as_an_indexed_jobs_pods_in_their_subdomain() -> None:
    # --learner-pods 2: each learner pod resolves as <job>-<index>.<subdomain> (the headless
    # Service NAME-ranks), its hostname <job>-<index>, as the Job controller names it.
    p = plan(objects(agents=4, learners=4, learner_pods=2))
    learners = [pod for pod in p.pods if pod.role == "learner"]
    assert [pod.workload for pod in learners] == ["t1-learner", "t1-learner-peers"]
    assert [flag_values(pod, "--hostname") for pod in learners] == [["t1-learner-0"], ["t1-learner-peers-0"]]
    assert flag_values(learners[0], "--network-alias") == ["t1-learner", "t1-ranks", "t1-learner-0",
                                                           "t1-learner-0.t1-ranks"]  # fmt: skip
    assert flag_values(learners[1], "--network-alias")[-1] == "t1-learner-peers-0.t1-ranks"
    assert env(learners[1])["SURREAL_LEARNER_POD"] == "1" and env(learners[1])["JOB_COMPLETION_INDEX"] == "0"
    assert env(learners[0])["SURREAL_RANKS_CONTROL"] == "t1-learner-0.t1-ranks:29400"
    # Without a subdomain a pod's hostname stays its name.
    assert flag_values(plan().pods[0], "--hostname") == ["t1-learner-0-xxxxx"]


def test_a_queued_experiments_jobset_runs_as_the_jobs_its_controller_makes() -> None:
    # --queue: one JobSet; replica 0 of each replicated Job is the Job <jobset>-<name>-0, and the
    # learner pods' names follow (kube.render.job_names). Suspended, it holds no pod.
    objs = objects(agents=4, learners=2, learner_pods=2, queue="team-a")
    [jobset] = [o for o in objs if o["kind"] == "JobSet"]
    with pytest.raises(containers_plan.ContainersError, match="JobSet t1 is suspended"):
        plan(objs)
    jobset["spec"]["suspend"] = False  # admitted
    p = plan(objs)
    assert [j.name for j in p.jobs] == ["t1-learner-0", "t1-learner-peers-0", "t1-actor-0", "t1-evaluator-0"]
    assert [(pod.workload, pod.index) for pod in p.pods if pod.role != "tensorboard"] == [
        ("t1-learner-0", 0), ("t1-learner-peers-0", 0), *(("t1-actor-0", i) for i in range(4)),
        ("t1-evaluator-0", 0)]  # fmt: skip
    learners = [pod for pod in p.pods if pod.role == "learner"]
    assert flag_values(learners[1], "--hostname") == ["t1-learner-peers-0-0"]
    assert env(learners[0])["SURREAL_RANKS_CONTROL"] == "t1-learner-0-0.t1-ranks:29400"
    assert containers_plan.job_pod(p, "t1-actor-0", 3).index == 3  # a replacement, from the Jobs


def test_security_context() -> None:
    for pod in plan().pods:
        assert flag_values(pod, "--user") == ["10001:10001"]
        assert flag_values(pod, "--group-add") == ["10001"]  # fsGroup
        assert "--read-only" in pod.args
        assert flag_values(pod, "--cap-drop") == ["ALL"]
        assert flag_values(pod, "--security-opt") == ["no-new-privileges"]
        # A Job's pods are never restarted in place (the job controller replaces them); a
        # Deployment's are.
        assert flag_values(pod, "--restart") == (["always"] if pod.role == "tensorboard" else ["no"])


def test_limits_become_cgroup_limits() -> None:
    p = plan()
    assert flag_values(p.pods[0], "--cpus") == ["1"] and flag_values(p.pods[0], "--memory") == ["2048m"]
    assert flag_values(p.pods[4], "--cpus") == ["0.25"] and flag_values(p.pods[4], "--memory") == ["512m"]
    assert containers_plan.quantity_mib("1Gi") == 1024 and containers_plan.quantity_mib("268435456") == 256
    assert containers_plan.quantity_cpus("1500m") == "1.5"
    with pytest.raises(containers_plan.ContainersError, match="memory quantity"):
        containers_plan.quantity_mib("lots")


def test_volumes_configmap_secret_emptydir_memory_and_the_claim() -> None:
    p = plan()
    learner, actor, tb = p.pods[0], p.pods[1], p.pods[4]
    volumes = flag_values(learner, "--volume")
    assert f"{WORK}/pods/t1-learner-0-xxxxx/spec:/etc/surreal:ro" in volumes
    assert f"{WORK}/pods/t1-learner-0-xxxxx/token:/var/run/secrets/surreal:ro" in volumes
    assert f"{WORK}/pods/t1-learner-0-xxxxx/tmp:/tmp:rw" in volumes
    assert f"{WORK}/volumes/t1-data:/var/lib/surreal:rw" in volumes  # the claim
    assert flag_values(learner, "--mount") == [
        "type=tmpfs,destination=/dev/shm,tmpfs-size=268435456,tmpfs-mode=1777"  # medium Memory, 256Mi
    ]
    paths = {h.path.name: h for h in learner.paths}
    assert paths["spec"].files.keys() == {"spec.yaml"} and paths["spec"].mode == 0o644
    assert paths["token"].files == {"token": "tok-123"} and paths["token"].mode == 0o440
    assert paths["token"].gid == 10001  # readable through the fsGroup only
    assert paths["tmp"].mode == 0o777
    assert paths["t1-data"].mode == 0o2775 and paths["t1-data"].gid == 10001
    # Actors' exp dir is an emptyDir of their own; TensorBoard mounts the learner's claim read-only.
    assert f"{WORK}/pods/{actor.name}/data:/var/lib/surreal:rw" in flag_values(actor, "--volume")
    assert f"{WORK}/volumes/t1-data:/var/lib/surreal:ro" in flag_values(tb, "--volume")


def test_probes_travel_with_the_pod() -> None:
    p = plan()
    assert p.pods[0].probes["readinessProbe"]["grpc"]["port"] == 6000
    assert p.pods[4].probes["readinessProbe"]["httpGet"]["port"] == "http"
    assert p.pods[4].probes["_ports"] == {"http": 6006}
    assert "readinessProbe" not in p.pods[1].probes


def test_labels_carry_the_run_and_the_pods_own() -> None:
    pod = plan().pods[1]
    labels = dict(v.split("=", 1) for v in flag_values(pod, "--label"))
    assert labels[containers_plan.RUN_LABEL] == "r1" and labels[containers_plan.POD_LABEL] == pod.name
    assert labels["surreal.io/experiment"] == "t1" and labels["surreal.io/component"] == "actor"


def _workload(objs: list[dict[str, Any]], kind: str = "Deployment") -> dict[str, Any]:
    return next(o for o in objs if o["kind"] == kind)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda o: _workload(o)["spec"]["template"]["spec"]["containers"].append({"name": "x"}),
            "only pods of one container",
        ),
        (
            lambda o: _workload(o)["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"].update(
                {"nvidia.com/gpu": "1"}
            ),
            "GPUs need a real cluster",
        ),
        (
            lambda o: _workload(o, "Job")["spec"]["template"]["spec"]["containers"][0]["env"].append(
                {"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
            ),
            "env X",
        ),
        (
            lambda o: _workload(o)["spec"]["template"]["spec"]["containers"][0]["securityContext"].update(
                {"runAsUser": 0}
            ),
            "runAsNonRoot needs a non-zero runAsUser",
        ),
        (
            lambda o: o.append({"kind": "Ingress", "metadata": {"name": "i"}}),
            "Ingress i: kind is not supported",
        ),
        (lambda o: o.remove(next(x for x in o if x["kind"] == "Secret")), "Secret t1-token is not among"),
        (
            lambda o: o.remove(next(x for x in o if x["kind"] == "ConfigMap")),
            "no ConfigMap holding spec.yaml",
        ),
        (
            lambda o: _workload(o)["spec"]["selector"]["matchLabels"].update({"x": "y"}),
            "selector does not match",
        ),
        (
            lambda o: (
                _workload(o)["spec"]["template"]["spec"]["volumes"].append({"name": "h", "hostPath": {}})
                or _workload(o)["spec"]["template"]["spec"]["containers"][0]["volumeMounts"].append(
                    {"name": "h", "mountPath": "/x"}
                )
            ),
            "volume h: only configMap",
        ),
    ],
)
def test_what_cannot_be_run_faithfully_is_refused_by_name(change: Any, message: str) -> None:
    objs = copy.deepcopy(objects())
    change(objs)
    with pytest.raises(containers_plan.ContainersError, match=message):
        plan(objs)


def test_make_host_path_sets_modes_and_group(tmp_path: Path) -> None:
    secret = containers_plan.HostPath(tmp_path / "token", 0o440, os.getgid(), {"token": "t"})
    containers_run.make_host_path(secret)
    assert (tmp_path / "token" / "token").read_text() == "t"
    assert (tmp_path / "token" / "token").stat().st_mode & 0o777 == 0o440
    containers_run.make_host_path(containers_plan.HostPath(tmp_path / "empty", 0o777))
    assert (tmp_path / "empty").stat().st_mode & 0o777 == 0o777


def test_containers_conf_sets_what_this_kind_of_host_needs(tmp_path: Path) -> None:
    text = containers_run.containers_conf(tmp_path).read_text()
    assert "default_ulimits = []" in text and 'cgroup_manager = "cgroupfs"' in text


def test_pip_config_mounts_carry_the_files_and_every_path_they_name(tmp_path: Path, monkeypatch) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    conf = tmp_path / "home/.config/pip/pip.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text(f"[global]\nfind-links = {wheels}\nextra-index-url = file://{tmp_path}/missing/simple\n")
    for key in ("PIP_CONFIG_FILE", "PIP_CERT", "PIP_FIND_LINKS", "PIP_CONSTRAINT"):
        monkeypatch.delenv(key, raising=False)
    mounts = pip_config_mounts(home=tmp_path / "home")
    assert f"--volume={conf}:/tmp/.config/pip/pip.conf:ro" in mounts
    assert f"--volume={wheels}:{wheels}:ro" in mounts
    assert not any("missing" in m for m in mounts)  # only paths that exist
    (tmp_path / "index/simple").mkdir(parents=True)
    conf.write_text(f"[global]\nextra-index-url = file://{tmp_path}/index/simple\n")
    assert f"--volume={tmp_path}/index:{tmp_path}/index:ro" in pip_config_mounts(home=tmp_path / "home")


def test_source_hash_follows_the_files_that_make_the_image(tmp_path: Path) -> None:
    for name in ("Dockerfile", ".dockerignore", "pyproject.toml", "README.md"):
        (tmp_path / name).write_text(name)
    for folder in ("surreal", "protocol", "orchestrator", "provisioner", "algorithms"):
        (tmp_path / folder).mkdir()
    (tmp_path / "surreal/a.py").write_text("1")
    before = source_hash(tmp_path)
    (tmp_path / "surreal/__pycache__").mkdir()
    (tmp_path / "surreal/__pycache__/a.pyc").write_text("junk")
    assert source_hash(tmp_path) == before
    (tmp_path / "surreal/a.py").write_text("2")
    assert source_hash(tmp_path) != before


def _image_sh(path: str, **env: str) -> subprocess.CompletedProcess[str]:
    script = Path(__file__).resolve().parents[2] / "scripts" / "image.sh"
    env = {"PATH": path, **env}
    return subprocess.run(["/bin/bash", str(script)], env=env, capture_output=True, text=True, timeout=60)


def test_make_image_without_an_engine_is_one_line(tmp_path: Path) -> None:
    for tool in ("dirname", "id", "mktemp"):
        (tmp_path / tool).symlink_to(shutil.which(tool) or f"/usr/bin/{tool}")
    proc = _image_sh(str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "image: no container engine: start Docker, or install podman (Debian: apt-get install podman runc)"
    ]
    proc = _image_sh(str(tmp_path), ENGINE="nerdctl")
    assert (proc.returncode, proc.stderr.strip()) == (2, "image: ENGINE=nerdctl is not installed")

"""`surreal create --backend kube --gpu N --provider/--pools`: placement from the provisioner's pools."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from surreal.cli.commands import cli


def pod_specs(*args: str) -> dict[str, dict]:
    argv = ["create", "p1", "--algo", "ppo", "--backend", "kube", "--dry-run", *args]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 0, result.output
    out = {}
    for obj in yaml.safe_load_all(result.output):
        if obj and obj["kind"] in ("Job", "Deployment"):
            out[obj["metadata"]["labels"]["surreal.io/component"]] = obj["spec"]["template"]["spec"]
    return out


def test_gpu_learner_goes_to_the_gpu_pool_and_actors_to_the_cpu_pool() -> None:
    specs = pod_specs("--gpu", "1", "--provider", "eks")
    learner, actor = specs["learner"], specs["actor"]
    assert learner["nodeSelector"] == {"surreal.io/pool": "gpu"}
    assert {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"} in (
        learner["tolerations"]
    )
    limits = learner["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "1"
    assert actor["nodeSelector"] == {"surreal.io/pool": "cpu"}
    assert "nvidia.com/gpu" not in actor["containers"][0]["resources"]["limits"]
    assert not actor.get("tolerations")


def test_pools_file(tmp_path: Path) -> None:
    pools = tmp_path / "pools.yaml"
    pools.write_text(
        yaml.safe_dump(
            {
                "pools": [
                    {"name": "cpu", "machine_type": "m5.xlarge", "min_nodes": 1, "max_nodes": 4},
                    {"name": "big", "machine_type": "p3.8xlarge", "max_nodes": 1, "gpu_type": "v100",
                     "gpu_count": 4, "taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]},
                ]
            }
        )
    )  # fmt: skip
    learner = pod_specs("--gpu", "2", "--pools", str(pools))["learner"]
    assert learner["nodeSelector"] == {"surreal.io/pool": "big"}
    toleration = {"key": "gpu", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}
    assert toleration in learner["tolerations"]


def test_local_clusters_are_not_pinned_but_keep_the_gpu_request() -> None:
    learner = pod_specs("--gpu", "1", "--provider", "kind")["learner"]
    assert "nodeSelector" not in learner
    assert learner["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_pools_need_the_kube_backend() -> None:
    result = CliRunner().invoke(cli, ["create", "p1", "--algo", "ppo", "--provider", "eks", "--dry-run"])
    assert result.exit_code == 2
    assert "need --backend kube" in result.output


def test_agents_per_pod_is_a_flag_and_packs_the_actor_job() -> None:
    argv = ["create", "p1", "--algo", "ppo", "--backend", "kube", "--dry-run", "--agents", "64",
            "--agents-per-pod", "16"]  # fmt: skip
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 0, result.output
    jobs = [o for o in yaml.safe_load_all(result.output) if o and o["kind"] == "Job"]
    [actor] = [o for o in jobs if o["metadata"]["labels"]["surreal.io/component"] == "actor"]
    assert actor["spec"]["completions"] == actor["spec"]["parallelism"] == 4
    env = {e["name"]: e.get("value") for e in actor["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SURREAL_AGENTS_IN_WORKER"] == "16"

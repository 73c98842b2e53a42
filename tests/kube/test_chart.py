"""helm/surreal, rendered by a real Helm engine (helm-python-sdk), gives the CLI's objects."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml
from jobset_schema import validate
from kube_support import CHART, make_spec

from surreal import spec as spec_mod
from surreal.algorithms.ppo import presets as ppo_presets
from surreal.algorithms.registry import ALGORITHMS
from surreal.orchestrator import sizing
from surreal.orchestrator.kube import output as ko
from surreal.orchestrator.kube import render as kr
from surreal.orchestrator.kube.pods import Placement
from surreal.orchestrator.policy import POLICIES
from surreal.runtime.envs import make as envs
from surreal.runtime.es import presets as es_presets
from surreal.runtime.exits import (
    EXIT_ALGORITHM_FAILED,
    EXIT_ENV_FAILED,
    EXIT_GROUP_NOT_FORMED,
    EXIT_LEARNER_GONE,
    EXIT_NO_ACTORS,
    EXIT_NOT_TRAINED,
    EXIT_PREEMPTED,
)
from surreal.spec import ExperimentSpec, load_spec_file

TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def render_chart(values: dict[str, Any], name: str = "exp1", namespace: str = "default") -> list[dict]:
    with helm.Chart.load(CHART) as chart:
        out = chart.render(values, name=name, namespace=namespace, is_install=True)
    return [
        doc
        for path, text in sorted(out.items())
        if path.endswith(".yaml")
        for doc in yaml.safe_load_all(text)
        if doc
    ]


class _Yaml12(yaml.SafeLoader):
    """YAML 1.2 floats: Go's toYaml writes 1e-05, which YAML 1.1 (PyYAML) reads as a string
    (load_spec_file converts it back; the spec data is compared here)."""


_Yaml12.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9]+(\.[0-9]*)?[eE][-+]?[0-9]+$"), list("-+0123456789")
)


def spec_data(config_map: dict[str, Any]) -> dict[str, Any]:
    """The ConfigMap's spec.yaml as data: what a component reads, however it is written."""
    return yaml.load(config_map["data"]["spec.yaml"], Loader=_Yaml12)


def spec_of(config_map: dict[str, Any], tmp_path: Path, tag: str) -> ExperimentSpec:
    path = tmp_path / f"{tag}.yaml"
    path.write_text(config_map["data"]["spec.yaml"])
    return load_spec_file(path)  # what every component does at start


def normalized(objects: list[dict[str, Any]], tmp_path: Path, tag: str) -> dict:
    """Objects by (kind, name), with the parts that legitimately differ checked and blanked:
    who manages them, the random token, and how the spec is written (compared as a spec and as
    data)."""
    out, spec, data = {}, None, None
    for original in objects:
        obj = copy.deepcopy(original)
        for meta in _metadatas(obj):
            meta["labels"]["app.kubernetes.io/managed-by"] = "<who>"
        if obj["kind"] == "Secret":
            assert len(obj["stringData"]["token"]) >= 32
            obj["stringData"]["token"] = "<token>"
        if obj["kind"] == "ConfigMap":
            spec, data = spec_of(obj, tmp_path, tag), spec_data(obj)
            obj["data"]["spec.yaml"] = "<spec>"
        out[(obj["kind"], obj["metadata"]["name"])] = obj
    return {"objects": out, "spec": spec, "data": data}


def _metadatas(obj: dict[str, Any]) -> list[dict[str, Any]]:
    found = [obj["metadata"]]
    spec = obj.get("spec", {})
    if "template" in spec:
        found.append(spec["template"]["metadata"])
    for replicated in spec.get("replicatedJobs", []):  # a JobSet: each Job's and its pods'
        found += [replicated["template"]["metadata"], replicated["template"]["spec"]["template"]["metadata"]]
    return found


def assert_same(cli: list[dict], chart: list[dict], tmp_path: Path, *, cli_values: bool = True) -> None:
    """`cli_values`: the chart was given the CLI's helm-values, and so writes the CLI's spec.yaml
    (the same data, `resolved` section included); otherwise (--set) a partial spec without one
    that the components complete, the same spec once loaded."""
    for obj in chart:
        for meta in _metadatas(obj):
            assert meta["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    a, b = normalized(cli, tmp_path, "cli"), normalized(chart, tmp_path, "chart")
    # A chart given --set values has no sizing section (how create packed the agents) to write.
    assert a["spec"] == (b["spec"] if cli_values else dataclasses.replace(b["spec"], sizing=a["spec"].sizing))
    assert "resolved" in a["data"]
    if cli_values:
        assert b["data"] == a["data"]
    else:
        assert "resolved" not in b["data"]
    assert sorted(a["objects"]) == sorted(b["objects"])
    for key, obj in a["objects"].items():
        assert b["objects"][key] == obj, key


CASES = {
    "defaults": (dict(), None, None),
    "512 agents": (dict(agents=512), None, None),
    "packed pods, gpu pool, overrides": (
        dict(agents=512, agents_per_pod=8, gpu=1, env="Pendulum-v1", seed=7, steps=2_000_000,
             namespace="rl", image="registry.example/surreal:0.1",
             overrides={"ppo.epochs": "5", "ppo.learning_rate": "3e-4"}),
        {"learner": Placement({"surreal.io/pool": "gpu"}, [TAINT]),
         "actor": Placement({"surreal.io/pool": "cpu"})},
        None,
    ),
    "emptyDir storage, resources": (
        dict(agents=6, agents_per_pod=3),
        None,
        kr.RenderSettings(
            storage="emptyDir",
            image_pull_policy="Always",
            resources={"actor": {"requests": {"cpu": "2", "memory": "1Gi"},
                                 "limits": {"cpu": "2", "memory": "1Gi"}}},
        ),
    ),
    "claim of a storage class": (dict(), None, kr.RenderSettings(storage_class="fast", storage_size="9Gi")),
    "environment kwargs": (dict(env="Pendulum-v1", overrides={"env_kwargs.g": "9.81"}), None, None),
    "a Kueue queue": (dict(agents=4, queue="team-a"), None, None),
    "learner ranks": (dict(agents=64, agents_per_pod=8, learners=4, gpu=4), None, None),
    "learner pods": (dict(agents=8, learners=4, learner_pods=2, gpu=2),
                     {"learner": Placement({"surreal.io/pool": "gpu"}, [TAINT])}, None),
    "three learner pods, emptyDir": (dict(agents=6, learners=6, learner_pods=3), None,
                                     kr.RenderSettings(storage="emptyDir")),
    "queued learner pods": (dict(agents=4, learners=4, learner_pods=2, queue="team-a"), None, None),
    "queued replay shards": (dict(algo="sac", agents=4, replay_shards=2, queue="team-a"),
                             {"learner": Placement({"surreal.io/pool": "gpu"}, [TAINT])}, None),
    "replay shards, emptyDir, their own pool": (
        dict(algo="sac", agents=4, replay_shards=3),
        {"replay": Placement({"surreal.io/pool": "cpu"})},
        kr.RenderSettings(storage="emptyDir"),
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_chart_renders_the_cli_objects_for_the_same_values(case: str, tmp_path: Path) -> None:
    flags, placement, settings = CASES[case]
    spec = make_spec(**flags)
    cli = kr.render(spec, placement, token="t" * 43, settings=settings)
    chart = render_chart(ko.helm_values(spec, placement, settings), namespace="elsewhere")
    assert_same(cli, chart, tmp_path)
    # helm install -f values-from-cli: the printed file, as Helm reads it.
    printed = ko.dry_run(spec, "helm-values", token="unused", placement=placement, settings=settings)
    assert_same(cli, render_chart(helm.values_from_yaml(printed), namespace="elsewhere"), tmp_path)


def test_the_chart_renders_a_sized_experiment_as_the_cli(tmp_path: Path) -> None:
    # Packed by the sizing (orchestrator/sizing.py): 4 actor pods of 128 agents asking 650m, more memory.
    def measure(agents: int) -> sizing.Measured:
        return sizing.Measured(agents, 10_000.0, 26_000.0, 2.0 * agents, 1.0)

    spec = sizing.size(make_spec(agents=512), measure)
    assert (spec.agents_per_pod, spec.sizing["actor_cpu"]) == (128, 0.65)
    cli = kr.render(spec, token="t" * 43)
    assert_same(cli, render_chart(ko.helm_values(spec), namespace="elsewhere"), tmp_path)
    printed = ko.dry_run(spec, "helm-values", token="unused")
    assert_same(cli, render_chart(helm.values_from_yaml(printed), namespace="elsewhere"), tmp_path)


def jobs_by_role(objects: list[dict]) -> dict[str, dict]:
    return {o["metadata"]["labels"]["surreal.io/component"]: o for o in objects if o["kind"] == "Job"}


def test_the_chart_has_the_renderers_retries_grace_period_and_exit_codes() -> None:
    # Each is written once in templates/_helpers.tpl: a change to kube_render.py must go there too.
    jobs = jobs_by_role(render_chart({}))
    assert sorted(jobs) == ["actor", "evaluator", "learner"]
    assert jobs["learner"]["spec"]["backoffLimit"] == POLICIES["learner"].retries
    assert jobs["actor"]["spec"]["backoffLimitPerIndex"] == POLICIES["actor"].retries
    assert jobs["evaluator"]["spec"]["backoffLimit"] == POLICIES["evaluator"].retries
    learner_pod = jobs["learner"]["spec"]["template"]["spec"]
    assert learner_pod["terminationGracePeriodSeconds"] == kr.LEARNER_GRACE_SECONDS
    for role, job in jobs.items():
        codes = {
            rule["action"]: rule["onExitCodes"]["values"]
            for rule in job["spec"]["podFailurePolicy"]["rules"]
            if "onExitCodes" in rule
        }
        assert codes["Ignore"] == [EXIT_PREEMPTED]
        assert codes["FailJob"] == (
            [EXIT_GROUP_NOT_FORMED, EXIT_NO_ACTORS, EXIT_ENV_FAILED, EXIT_NOT_TRAINED, EXIT_ALGORITHM_FAILED]
            if role == "learner"
            else [EXIT_LEARNER_GONE, EXIT_ENV_FAILED, EXIT_ALGORITHM_FAILED]
        )
        assert codes["FailJob"] == list(POLICIES[role].fatal_exits)
        if role != "learner":
            assert "terminationGracePeriodSeconds" not in job["spec"]["template"]["spec"]


def test_the_chart_queues_one_jobset_with_the_renderers_failure_policy() -> None:
    # jobset.yaml writes the JobSet's rules out; kr.jobset_failure_policy derives them from policy.py.
    objects = render_chart({"queue": "team-a"})
    assert not [o for o in objects if o["kind"] == "Job"]
    labelled = [o for o in objects if kr.QUEUE_LABEL in o["metadata"]["labels"]]
    [jobset] = labelled
    assert jobset["kind"] == "JobSet" and jobset["metadata"]["labels"][kr.QUEUE_LABEL] == "team-a"
    assert jobset["spec"]["suspend"] is True
    assert jobset["spec"]["failurePolicy"] == kr.jobset_failure_policy()
    plain = jobs_by_role(render_chart({}))
    for replicated in jobset["spec"]["replicatedJobs"]:
        spec = replicated["template"]["spec"]
        env = spec["template"]["spec"]["containers"][0]["env"]
        assert {"name": "SURREAL_JOBS_WATCH", "value": "kube:default/exp1/jobset"} in env  # watch.py
        env[:] = plain[replicated["name"]]["spec"]["template"]["spec"]["containers"][0]["env"]
        assert spec == plain[replicated["name"]]["spec"]


def test_the_chart_gives_the_components_their_watch_and_tensorboard_no_token() -> None:
    objects = render_chart({}, namespace="rl")
    by_kind = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert {
        ("ServiceAccount", "exp1-watch"),
        ("Role", "exp1-watch"),
        ("RoleBinding", "exp1-watch"),
    } <= by_kind
    for role, job in jobs_by_role(objects).items():
        pod = job["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == "exp1-watch" and pod["automountServiceAccountToken"] is True
        env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
        assert env["SURREAL_JOBS_WATCH"] == "kube:rl/exp1", role
    [tb] = [o for o in objects if o["kind"] == "Deployment"]
    assert tb["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in tb["spec"]["template"]["spec"]


def test_without_a_queue_the_jobs_start_at_once() -> None:
    for job in jobs_by_role(render_chart({})).values():
        assert kr.QUEUE_LABEL not in job["metadata"]["labels"] and "suspend" not in job["spec"]


def test_every_algorithm_renders_the_same(algo: str, tmp_path: Path) -> None:
    spec = make_spec(algo=algo, agents=512)
    chart = render_chart(ko.helm_values(spec))
    assert_same(kr.render(spec, token="t" * 43), chart, tmp_path)


def test_the_chart_knows_which_algorithms_keep_replay(algo: str) -> None:
    # `surreal.replayAlgos` in _helpers.tpl: --set algo=X alone renders X's replay shards.
    jobs = jobs_by_role(render_chart({"algo": algo}))
    assert ("replay" in jobs) == ("replay" in ALGORITHMS[algo].roles)


def test_helm_install_with_set_algo_and_agents_deploys_what_the_cli_creates(tmp_path: Path) -> None:
    # helm install exp1 helm/surreal --set algo=ppo,agents=512: no CLI, no values file.
    chart = render_chart(helm.parse_set_string("algo=ppo,agents=512"))
    cli = kr.render(make_spec(algo="ppo", agents=512), token="t" * 43)
    assert_same(cli, chart, tmp_path, cli_values=False)
    for obj in chart:
        validate(obj, "1.33")
    # --set queue=team-a: the CLI's --queue.
    chart = render_chart(helm.parse_set_string("algo=ppo,agents=512,queue=team-a"))
    cli = kr.render(make_spec(algo="ppo", agents=512, queue="team-a"), token="t" * 43)
    assert_same(cli, chart, tmp_path, cli_values=False)


def test_the_chart_writes_a_partial_spec_that_components_resolve(tmp_path: Path) -> None:
    chart = render_chart({"agents": 4, "config": {"epochs": 3}})
    text = chart_config_map(chart)["data"]["spec.yaml"]
    assert "minibatch_size" not in text  # the preset is not copied into the chart
    assert "steps" not in text  # nor its step budget, which follows the agents
    assert "resolved" not in text  # nor a resolved env: each component resolves it at start
    resolved = spec_of(chart_config_map(chart), tmp_path, "partial")
    assert resolved.config.epochs == 3 and resolved.env == "CartPole-v1"
    cli = make_spec(agents=4)
    assert resolved.config.minibatch_size == cli.config.minibatch_size
    assert resolved.steps == cli.steps


def test_the_cli_values_give_the_pods_the_resolved_env_so_none_builds_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = make_spec(env="Pendulum-v1", agents=4, overrides={"env_kwargs.g": "9.81"})
    values = helm.values_from_yaml(ko.dry_run(spec, "helm-values", token="unused"))
    assert values["resolved"] == spec.to_dict()["resolved"]
    config_map = chart_config_map(render_chart(values))

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"an environment was resolved or built: {args!r}")

    for module in (envs, ppo_presets, es_presets):
        monkeypatch.setattr(module, "resolve_env", refuse)
    monkeypatch.setattr(envs, "make_raw", refuse)
    assert spec_of(config_map, tmp_path, "resolved") == kr.kube_spec(spec)


def test_infinite_action_bounds_leave_resolved_to_the_components() -> None:
    # Helm reads no .inf from a values file; the pods resolve the env at start, as with --set.
    spec = make_spec(env="Pendulum-v1")
    unbounded = dataclasses.replace(spec.resolved, action_low=(-math.inf,), action_high=(math.inf,))
    printed = ko.dry_run(dataclasses.replace(spec, resolved=unbounded), "helm-values", token="unused")
    values = helm.values_from_yaml(printed)
    assert "resolved" not in values and values["env"] == "Pendulum-v1"
    assert "resolved" not in spec_data(chart_config_map(render_chart(values)))


def chart_config_map(objects: list[dict]) -> dict:
    return next(o for o in objects if o["kind"] == "ConfigMap")


def test_helm_lint_passes_strictly() -> None:
    learner_pods = make_spec(agents=4, learners=4, learner_pods=2, queue="team-a")
    shards = make_spec(algo="sac", replay_shards=2)
    for values in (None, {"algo": "ppo", "agents": 512}, ko.helm_values(make_spec(gpu=1, queue="team-a")),
                   ko.helm_values(learner_pods), ko.helm_values(shards)):  # fmt: skip
        report = helm.lint(CHART, values, strict=True)
        assert report["errors"] == [], report
        assert [m for m in report["messages"] if m["severity"] >= 2] == [], report


def test_values_schema_rejects_bad_values() -> None:
    with helm.Chart.load(CHART) as chart:
        chart.validate_schema(chart.values)
        chart.validate_schema(chart.merge_values({"queue": "team-a"}))
        chart.validate_schema(chart.merge_values({"queue": "q" * 63}))
        for bad in (
            {"agents": 0},
            {"agents": "many"},
            {"storage": {"type": "nfs"}},
            {"agent": 3},
            {"resolved": {"obs_dim": 4}},
            {"resolved": {"envs": "CartPole-v1"}},
            {"queue": "Team_A"},
            {"queue": "1team"},
            {"queue": "team-"},
            {"queue": "q" * 64},
            {"queue": 5},
            {"learnerPods": 0},
            {"learnerPods": "two"},
            {"replayShards": -1},
            {"replayShards": spec_mod.MAX_REPLAY_SHARDS + 1},
        ):
            with pytest.raises(helm.HelmValuesError):
                chart.validate_schema(chart.merge_values(bad))


@pytest.mark.parametrize(
    ("values", "name", "message"),
    [
        ({"agents": 10, "agentsPerPod": 4}, "exp1", "must be a multiple of agentsPerPod"),
        ({}, "x" * 41, "longer than 40 characters"),
        ({}, "Exp_1", "DNS-1123"),
        (
            {"agents": 8, "agentsPerPod": 4, "learners": 3},
            "exp1",
            "3 learner ranks need an actor pod each, and there would be 2",
        ),
        ({"algo": "es", "learners": 2}, "exp1", "es trains with one learner"),
        (
            {"agents": 4, "learners": 4, "learnerPods": 3},
            "exp1",
            "learner_pods 3: the 4 learner ranks must spread evenly over the learner pods",
        ),
        ({"learnerPods": 2}, "exp1", r"learner_pods 2: the 1 learner ranks must spread evenly"),
        ({"replayShards": 2}, "exp1", r"replay_shards 2: ppo learns on-policy and keeps no replay"),
    ],
)
def test_chart_refuses_what_the_cli_refuses(values: dict, name: str, message: str) -> None:
    with pytest.raises(helm.HelmError, match=message):
        render_chart(values, name=name)


def test_readme_documents_every_value() -> None:
    readme = (CHART / "README.md").read_text()

    def keys(values: dict[str, Any], prefix: str = "") -> list[str]:
        out = []
        for key, value in values.items():
            if isinstance(value, dict) and value and key not in ("config", "resources"):
                out += keys(value, f"{prefix}{key}.")
            else:
                out.append(f"{prefix}{key}")
        return out

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    missing = [k for k in keys(values) if f"`{k}`" not in readme]
    assert not missing, f"README.md does not document {missing}"


def test_values_schema_bounds_are_the_specs() -> None:
    """The chart's values get the CLI's answer: the schema's bounds are the spec's constants, and
    what the spec refuses at its edges the schema refuses too."""
    props = json.loads((CHART / "values.schema.json").read_text())["properties"]
    assert props["agents"]["maximum"] == props["agentsPerPod"]["maximum"] == spec_mod.MAX_AGENTS
    assert props["seed"]["maximum"] == spec_mod.MAX_SEED
    assert props["steps"]["maximum"] == spec_mod.MAX_STEPS
    assert props["gpu"]["maximum"] == spec_mod.MAX_GPU
    assert props["learners"]["maximum"] == spec_mod.MAX_LEARNERS
    assert props["image"]["pattern"] == spec_mod.IMAGE_RE.pattern
    assert props["image"]["maxLength"] == spec_mod.MAX_IMAGE_LENGTH
    with helm.Chart.load(CHART) as chart:
        for ok in ({"seed": spec_mod.MAX_SEED}, {"agents": spec_mod.MAX_AGENTS}, {"namespace": "team-a"},
                   {"namespace": "1team"}):  # fmt: skip
            chart.validate_schema(chart.merge_values(ok))
        for bad in ({"seed": spec_mod.MAX_SEED + 1}, {"agents": spec_mod.MAX_AGENTS + 1},
                    {"steps": spec_mod.MAX_STEPS + 1}, {"gpu": spec_mod.MAX_GPU + 1}, {"namespace": "Bad_NS"},
                    {"namespace": "n" * 64}, {"image": ""}, {"image": "surreal: local"},
                    {"image": "Registry/UPPER:Tag"}):  # fmt: skip
            with pytest.raises(helm.HelmValuesError):
                chart.validate_schema(chart.merge_values(bad))

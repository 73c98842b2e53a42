"""docs/kubernetes.md's "question -> kubectl command" table is true of the rendered objects: every
object it names is rendered, every label selector selects rendered Jobs or pods, and every field
its JSONPath and custom columns read exists in the API of each Kubernetes version we support
(the official schemas that kubernetes-validate ships). Pure: nothing is run against a cluster."""

from __future__ import annotations

import json
import re
import shlex
from functools import cache
from pathlib import Path
from typing import Any

import jobset_schema
import kubernetes_validate
import pytest
from kube_support import KUBE_VERSIONS, REPO, make_spec

from surreal.orchestrator.kube import render as kr
from surreal.orchestrator.program import ENV_TERMINATION_LOG

EXP = "exp1"
# What a person asks of a run, by the words of its row (the list).
QUESTIONS = ("is it running", "is it queued", "how far", "did it finish", "final numbers",
             "what failed", "where are the logs", "how many restarts")  # fmt: skip
SCHEMAS = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
KIND_SCHEMA = {"jobs": "job-batch-v1.json", "job": "job-batch-v1.json", "pods": "pod-v1.json",
               "pod": "pod-v1.json"}  # fmt: skip


def table() -> dict[str, list[str]]:
    """Question -> the kubectl commands in its row."""
    text = (REPO / "docs" / "kubernetes.md").read_text()
    start = text.index("| question | kubectl |")
    rows = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        question, cell = (c.strip() for c in line.strip("|").split("|", 1))
        rows[question] = [c.replace("$E", EXP) for c in re.findall(r"`(kubectl [^`]+)`", cell)]
    return rows


def commands() -> list[str]:
    return [c for cs in table().values() for c in cs]


def rendered(queue: str | None = None) -> list[dict[str, Any]]:
    """The objects of an off-policy experiment (its replay shards' too), and any other that an
    on-policy one has: the table answers for both."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for algo in ("sac", "ppo"):
        spec = make_spec(EXP, algo=algo, agents=4, agents_per_pod=2, queue=queue)
        for obj in kr.render(spec, token="t0ken"):
            found.setdefault((obj["kind"], obj["metadata"]["name"]), obj)
    return list(found.values())


def jobs() -> dict[str, dict[str, Any]]:
    """The Jobs by name; a queued experiment's are its JobSet's, with the names its controller
    gives them (the same labels and specs)."""
    found = {o["metadata"]["name"]: o for o in rendered() if o["kind"] == "Job"}
    names = kr.job_names(EXP, queued=True)
    for obj in rendered("research"):
        for rjob in obj["spec"]["replicatedJobs"] if obj["kind"] == "JobSet" else []:
            found[names[rjob["name"]]] = {"metadata": rjob["template"]["metadata"], **rjob["template"]}
    return found


def jobsets() -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in rendered("research") if o["kind"] == "JobSet"}


@cache
def definitions(version: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / f"v{version}.0-local-strict" / "_definitions.json").read_text())["$defs"]


def resolve(schema: dict[str, Any], version: str) -> dict[str, Any]:
    while "$ref" in schema:
        schema = definitions(version)[schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def field_exists(kind: str, path: str, version: str) -> bool:
    """Whether `path` (kubectl JSONPath without braces, e.g. `.status.conditions[?(@.type=="F")]
    .reason`) names fields of `kind`'s objects in `version`'s API."""
    if kind in ("jobset", "jobsets"):  # its spec: the JobSet schema; its metadata: any object's
        if path.startswith(".metadata."):
            return field_exists("pods", path, version)
        return jobset_field_exists(path)
    schema = json.loads((SCHEMAS / f"v{version}.0-local-strict" / KIND_SCHEMA[kind]).read_text())
    if kind in ("jobset", "jobsets"):  # its spec: the JobSet schema; its metadata: any object's
        if path.startswith(".metadata."):
            return field_exists("pods", path, version)
        return jobset_field_exists(path)
    filters = re.findall(r"\[\?\(@\.(\w+)", path)
    steps = re.sub(r"\[[^\]]*\]", "", path).strip(".").split(".")
    for i, step in enumerate(steps):
        schema = resolve(schema, version)
        if "items" in schema and "properties" not in schema:
            schema = resolve(schema["items"], version)
        if step not in schema.get("properties", {}):
            return False
        schema = schema["properties"][step]
        nxt = resolve(schema, version)
        if "items" in nxt and filters and i + 1 < len(steps):  # a filter on this list's elements
            element = resolve(nxt["items"], version)
            if not all(f in element.get("properties", {}) for f in filters):
                return False
    return True


def jobset_field_exists(path: str) -> bool:
    schema: dict[str, Any] = jobset_schema.SCHEMA
    for step in path.strip(".").split("."):
        if step not in schema.get("properties", {}):
            return False
        schema = schema["properties"][step]
    return True


def paths(command: str) -> list[str]:
    """The fields that a command's -o jsonpath= or custom-columns= reads."""
    found = []
    for arg in shlex.split(command):
        if arg.startswith("jsonpath="):
            for expr in re.findall(r"\{([^{}]+)\}", arg[len("jsonpath=") :]):
                expr = expr.strip()
                if expr == "end" or expr.startswith('"'):
                    continue
                expr = expr.removeprefix("range ")
                found.append(re.sub(r"^\.items\[\*\]", "", expr))
        elif arg.startswith("custom-columns="):
            found += [col.split(":", 1)[1] for col in arg[len("custom-columns=") :].split(",")]
    return [p for p in found if p]  # `{range .items[*]}` reads no field of its own


def kinds(command: str) -> list[str]:
    argv = shlex.split(command)
    if argv[1] == "get":
        return argv[2].split(",")
    return []


def test_the_table_answers_every_question() -> None:
    questions = list(table())
    for words in QUESTIONS:
        assert any(words in q for q in questions), (words, questions)
    assert all(table().values()), "a row without a kubectl command"


@pytest.mark.parametrize("command", commands())
def test_every_object_it_names_is_rendered(command: str) -> None:
    argv = shlex.split(command)
    named = [a.split("/", 1)[1] for a in argv if a.startswith("job/")]
    if argv[1] == "get" and argv[2] == "job":
        named.append(argv[3])
    assert all(name in jobs() for name in named), (named, sorted(jobs()))
    if argv[1] == "get" and argv[2] == "jobset":
        assert argv[3] in jobsets(), (argv[3], sorted(jobsets()))


@pytest.mark.parametrize("command", [c for c in commands() if " -l " in c])
def test_every_selector_selects_rendered_jobs_and_pods(command: str) -> None:
    argv = shlex.split(command)
    selector = dict(pair.split("=", 1) for pair in argv[argv.index("-l") + 1].split(","))
    for kind in kinds(command) or ["pods"]:  # `kubectl logs`: pods
        if kind in ("jobs", "job"):
            labels = [j["metadata"]["labels"] for j in jobs().values()]
        else:
            labels = [j["spec"]["template"]["metadata"]["labels"] for j in jobs().values()]
        selected = [lb for lb in labels if all(lb.get(k) == v for k, v in selector.items())]
        assert selected, (kind, selector)


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("command", [c for c in commands() if paths(c)])
def test_every_field_it_reads_exists_in_the_api(command: str, version: str) -> None:
    (kind,) = kinds(command)
    for path in paths(command):
        assert field_exists(kind, path, version), (path, kind, version)


def test_the_checker_refuses_a_field_that_does_not_exist() -> None:
    assert field_exists("jobs", ".status.failed", "1.33")
    assert field_exists("jobs", '.status.conditions[?(@.type=="Failed")].reason', "1.33")
    assert not field_exists("jobs", ".status.restarts", "1.33")
    assert not field_exists("jobs", '.status.conditions[?(@.kind=="Failed")].reason', "1.33")
    assert not field_exists("pods", ".status.containerStatuses[0].state.terminated.msg", "1.33")


def test_what_the_queued_row_reads_is_set_on_the_rendered_jobset() -> None:
    [jobset] = jobsets().values()
    assert jobset["spec"]["suspend"] is True and jobset["metadata"]["labels"][kr.QUEUE_LABEL] == "research"
    assert jobset_field_exists(".spec.suspend") and not jobset_field_exists(".spec.suspended")


def test_the_final_numbers_row_reads_what_the_learner_writes() -> None:
    # The learner's final status goes to its termination log, which the row's JSONPath reads.
    (learner,) = jobs()[f"{EXP}-learner"]["spec"]["template"]["spec"]["containers"]
    assert learner.get("terminationMessagePath", "/dev/termination-log") == "/dev/termination-log"
    program = kr.kube_program(make_spec(EXP))
    assert program.component("learner").env[ENV_TERMINATION_LOG] == "/dev/termination-log"

"""The components' watch of their Jobs on Kubernetes (orchestrator/kube/watch.py): a learner whose
actors' Job failed ends Failed with a reason naming the actors; actors and the evaluator end (exit
0) once their learner's Job ended; an API that cannot be read is logged and never fails anyone.
Against the in-memory API server, with a short poll; every wait is on a condition."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_api import FakeApi, fake_client
from kube_support import make_spec
from kubernetes import client

from surreal import component
from surreal.orchestrator import program as prog
from surreal.orchestrator.kube import observe as ks
from surreal.orchestrator.kube import render as kr
from surreal.orchestrator.kube import watch as kw
from surreal.orchestrator.kube.client import KubeClient
from surreal.orchestrator.policy import POLICIES
from surreal.runtime import preemption
from surreal.runtime.exits import EXIT_NO_ACTORS
from surreal.runtime.run import RoleFailed

POLL = 0.01  # seconds between looks in these tests (15 in a pod)
WAIT = 10.0  # the most any condition here is waited for


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, f"no {what} within {WAIT} s"
        time.sleep(POLL)


@pytest.fixture
def api() -> FakeApi:
    """An experiment `exp1` in namespace `default`, as `surreal create` makes it."""
    fake = FakeApi()
    KubeClient(fake_client(fake), context="kind-surreal").create(make_spec(agents=4), token="tok")
    return fake


def set_condition(api: FakeApi, job: str, kind: str, reason: str = "", message: str = "") -> None:
    cond = {"type": kind, "status": "True", "reason": reason, "message": message}
    api.objects[("jobs.batch", "default", job)]["status"] = {"conditions": [cond]}


class Ended:
    """An on_end that records the ending and lets a test wait for it."""

    def __init__(self) -> None:
        self.endings: list[kw.Ending] = []
        self.event = threading.Event()

    def __call__(self, ending: kw.Ending) -> None:
        self.endings.append(ending)
        self.event.set()

    def wait(self) -> kw.Ending:
        assert self.event.wait(WAIT), "the watch did not end the component"
        [ending] = self.endings
        return ending


@pytest.fixture
def watching(api: FakeApi) -> Iterator[Callable[..., tuple[kw.JobWatch, Ended]]]:
    started: list[kw.JobWatch] = []

    def start(role: str, **kwargs: Any) -> tuple[kw.JobWatch, Ended]:
        ended = Ended()
        kwargs.setdefault("api", lambda: client.BatchV1Api(fake_client(api)))
        watch = kw.JobWatch(role, "default", "exp1", ended, interval=POLL, **kwargs).start()
        started.append(watch)
        return watch, ended

    yield start
    for watch in started:
        watch.stop()


def test_the_learner_ends_with_its_fatal_code_once_the_actors_job_failed(api, watching) -> None:
    watch, ended = watching("learner")
    wait_until(lambda: watch.looks >= 3, "looks")
    assert not ended.endings  # the actors' Job runs: nothing to do
    set_condition(api, "exp1-actor", "Failed", "FailedIndexes", "Job has failed indexes")
    ending = ended.wait()
    assert ending.code == EXIT_NO_ACTORS and EXIT_NO_ACTORS in POLICIES["learner"].fatal_exits
    assert ending.reason == ("no actor is left to feed the learner: the actors' Job exp1-actor failed "
                             "(FailedIndexes: Job has failed indexes)")  # fmt: skip
    looked = watch.looks
    time.sleep(20 * POLL)
    assert watch.looks == looked  # it ended with the first look that saw it


def test_the_learner_goes_on_while_its_actors_job_runs_or_completes(api, watching) -> None:
    set_condition(api, "exp1-actor", "Complete")
    watch, ended = watching("learner")
    wait_until(lambda: watch.looks >= 3, "looks")
    assert not ended.endings


@pytest.mark.parametrize("role", ["actor", "evaluator"])
@pytest.mark.parametrize(
    ("kind", "says"), [("Complete", "completed"), ("Failed", "failed (BackoffLimitExceeded")]
)
def test_workers_exit_0_once_their_learners_job_ended(api, watching, role, kind, says) -> None:
    watch, ended = watching(role)
    wait_until(lambda: watch.looks >= 2, "looks")
    assert not ended.endings
    set_condition(
        api, "exp1-learner", kind, "BackoffLimitExceeded", "Job has reached the specified backoff limit"
    )
    ending = ended.wait()
    assert ending.code == 0 and ending.reason.startswith(f"the learner's Job exp1-learner {says}")


def test_a_worker_that_starts_after_its_learners_job_ended_ends_at_its_first_look(api, watching) -> None:
    set_condition(api, "exp1-learner", "Complete")
    watch, ended = watching("actor")
    assert ended.wait().code == 0 and watch.looks <= 1


@pytest.mark.parametrize(
    "breakage",
    ["server error", "forbidden", "unreachable", "no such Job", "no in-cluster config"],
)
def test_an_api_that_cannot_be_read_is_logged_and_never_fails_the_component(
    api, watching, caplog, breakage
) -> None:
    make_api: Callable[[], client.BatchV1Api] = lambda: client.BatchV1Api(fake_client(api))  # noqa: E731
    failing = {"on": True}
    if breakage == "server error":
        api.fail[("list", "jobs.batch")] = 500
    elif breakage == "forbidden":
        api.fail[("list", "jobs.batch")] = 403
    elif breakage == "unreachable":
        api.unreachable = True
    elif breakage == "no such Job":
        job = api.objects.pop(("jobs.batch", "default", "exp1-actor"))
    else:

        def make_api() -> client.BatchV1Api:  # as outside a pod: ConfigException
            if failing["on"]:
                raise kw.config.ConfigException("Service host/port is not set.")
            return client.BatchV1Api(fake_client(api))

    with caplog.at_level("WARNING", logger=kw.__name__):
        watch, ended = watching("learner", api=make_api)
        wait_until(lambda: watch.looks >= 5, "looks")
    assert not ended.endings
    warnings = [r for r in caplog.records if r.name == kw.__name__]
    assert (
        len(warnings) == 1 and "cannot read Job default/exp1-actor (the watch goes on)" in warnings[0].message
    )
    # It goes on looking: once the API answers, the actors' failure ends the learner.
    api.fail.clear()
    api.unreachable = False
    failing["on"] = False
    if breakage == "no such Job":
        api.add("jobs.batch", job)
    set_condition(api, "exp1-actor", "Failed", "PodFailurePolicy")
    assert ended.wait().code == EXIT_NO_ACTORS


def test_a_lasting_error_is_logged_again_after_a_while(api, watching, caplog) -> None:
    api.fail[("list", "jobs.batch")] = 500
    with caplog.at_level("WARNING", logger=kw.__name__):
        watch, _ = watching("actor", log_every=0.0)
        wait_until(lambda: watch.looks >= 3, "looks")
    assert len([r for r in caplog.records if r.name == kw.__name__]) >= 3


def test_the_watch_asks_only_what_the_pods_role_grants(api, watching) -> None:
    role = next(o for o in kr.render(make_spec(agents=4), token="t") if o["kind"] == "Role")
    [rule] = role["rules"]
    api.requests.clear()
    for who in ("learner", "actor", "evaluator"):
        watch, _ = watching(who)
        wait_until(lambda w=watch: w.looks >= 2, "looks")
        watch.stop()
    assert api.requests
    for request in api.requests:
        assert (request.verb, request.resource) == ("list", "jobs.batch")
        assert rule["verbs"] == ["list"] and rule["resources"] == ["jobs"] and rule["apiGroups"] == ["batch"]
        # RBAC allows a list restricted to names only with a field selector naming one of them.
        field, _, name = request.query["fieldSelector"].partition("=")
        assert field == "metadata.name" and name in rule["resourceNames"]
        assert request.query["resourceVersion"] == "0"  # from the API server's cache


def test_decide_reads_the_failure_target_as_failed() -> None:
    target = {"type": "FailureTarget", "status": "True", "reason": "R"}
    job = {"metadata": {"name": "exp1-actor"}, "status": {"conditions": [target]}}
    why = "no actor is left to feed the learner: the actors' Job exp1-actor failed (R)"
    assert kw.ending_of("learner", job) == kw.Ending(EXIT_NO_ACTORS, why)
    job["status"]["conditions"][0]["status"] = "False"
    assert kw.ending_of("learner", job) is None and kw.ending_of("actor", job) is None
    assert kw.watched_job("learner", "e") == "e-actor" and kw.watched_job("evaluator", "e") == "e-learner"
    assert kw.parse_experiment("rl/exp1") == ("rl", "exp1", False)
    # A queued experiment's Jobs are its JobSet's: <jobset>-<replicatedJob>-<index>.
    assert kw.parse_experiment("rl/exp1/jobset") == ("rl", "exp1", True)
    assert (
        kw.watched_job("learner", "e", True) == "e-actor-0"
        and kw.watched_job("actor", "e", True) == "e-learner-0"
    )
    with pytest.raises(ValueError, match="NAMESPACE/EXPERIMENT"):
        kw.parse_experiment("rl/exp1/deployment")
    with pytest.raises(ValueError, match="NAMESPACE/EXPERIMENT"):
        kw.parse_experiment("exp1")


# --- the component's side: which watch starts, and what its ending does ---------------------


@pytest.fixture
def fresh_preemption() -> Iterator[None]:
    preemption._requested.clear()
    preemption._failure.clear()
    yield
    preemption._requested.clear()
    preemption._failure.clear()


def test_only_a_pod_watches_and_never_a_learner_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[tuple[str, str, str, Any]] = []
    queued_: list[bool] = []

    class Recorder:
        def __init__(self, role: str, namespace: str, experiment: str, on_end: Any, *, queued: bool) -> None:
            started.append((role, namespace, experiment, on_end))
            queued_.append(queued)

        def start(self) -> Recorder:
            return self

    monkeypatch.setattr(kw, "JobWatch", Recorder)
    monkeypatch.delenv(prog.ENV_JOBS_WATCH, raising=False)
    monkeypatch.delenv("RANK", raising=False)
    assert component.start_jobs_watch("actor") is None  # locally, in containers
    monkeypatch.setenv(prog.ENV_JOBS_WATCH, "kube:rl/exp1")
    for role in ("learner", "actor", "evaluator"):
        assert component.start_jobs_watch(role) is not None
    assert started == [("learner", "rl", "exp1", component.stop_learner),
                       ("actor", "rl", "exp1", component.end_worker),
                       ("evaluator", "rl", "exp1", component.end_worker)]  # fmt: skip
    monkeypatch.setenv(prog.ENV_JOBS_WATCH, "kube:rl/exp1/jobset")  # a queued experiment's pods
    assert component.start_jobs_watch("actor") is not None
    assert queued_ == [False, False, False, True] and started[-1][:3] == ("actor", "rl", "exp1")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert component.start_jobs_watch("learner") is None  # its agent watches
    monkeypatch.delenv("RANK")
    monkeypatch.setenv(prog.ENV_JOBS_WATCH, "kube:nonsense")
    assert component.start_jobs_watch("learner") is None


def test_the_learner_stopped_by_its_watch_saves_and_exits_failed_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_preemption: None
) -> None:
    # A real PPO learner, told (as its watch would) that no actor is left before it trained.
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(make_spec(agents=1).to_yaml())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "termination-log"
    env = {prog.ENV_LEARNER_ADDR: f"127.0.0.1:{port}", prog.ENV_TOKEN: "tok",
           prog.ENV_EXP_DIR: str(tmp_path), prog.ENV_TERMINATION_LOG: str(log)}  # fmt: skip
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv(prog.ENV_JOBS_WATCH, raising=False)
    monkeypatch.setattr(component.signal, "signal", lambda *a: None)  # pytest keeps its handlers
    monkeypatch.setattr(component, "exit_within", lambda seconds, code: None)
    reason = "no actor is left to feed the learner: the actors' Job exp1-actor failed (FailedIndexes)"
    component.stop_learner(kw.Ending(EXIT_NO_ACTORS, reason))
    assert preemption.requested() and isinstance(preemption.failure(), RoleFailed)
    assert component.run_component("learner", spec_path, 0) == EXIT_NO_ACTORS
    message = json.loads(log.read_text())
    assert message["phase"] == "Failed" and message["exit_code"] == EXIT_NO_ACTORS
    assert message["reason"] == reason
    assert list((tmp_path / "checkpoints").iterdir()), "it saved the version it had"
    # What `surreal status` then says of the run.
    pod = {"metadata": {"name": "exp1-learner-0-a", "labels": {"surreal.io/component": "learner"}},
           "status": {"containerStatuses": [{"name": "learner", "state": {"terminated": {
               "exitCode": EXIT_NO_ACTORS, "message": log.read_text()}}}]}}  # fmt: skip
    assert ks.learner_failure([pod]) == f"learner: {reason}"


def test_the_issues_bounds_hold_from_the_constants() -> None:
    """No actor left: the run ends Failed within 2 minutes; the learner's Job ended: every other
    component ends within 2 minutes (issue 25)."""
    from surreal.component import EXIT_SECONDS

    latest_look = 1.5 * kw.POLL_SECONDS  # the jittered wait between two looks, at most
    look = kw.REQUEST_TIMEOUT[0] + kw.REQUEST_TIMEOUT[1]  # one look that hangs, at most
    update_in_flight = 5.0  # Breakout's update on a CPU, the longest measured (docs/kubernetes.md)
    job_controller = 10.0  # the Job controller turns a FailJob exit into the Job's Failed condition
    learner = latest_look + look + update_in_flight + EXIT_SECONDS + job_controller
    assert learner <= 120, learner
    workers = latest_look + look  # they exit from the watch's thread at once (os._exit)
    assert workers <= 120, workers

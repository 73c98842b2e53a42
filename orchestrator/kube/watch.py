"""In a pod: a component's watch of its experiment's Jobs, so that nothing waits forever on a
cluster (docs/decisions.md, "Components watch their Jobs").

The local supervisor and the containers' Job controller end a run's other components when a role
has failed for good; on Kubernetes each Job is on its own, so each component looks itself, at
start and then every POLL_SECONDS (jittered, so that hundreds of actor pods do not ask at once):
the learner at the actors' Job (`ending_of`: Failed ends it with EXIT_NO_ACTORS, a fatal exit of
its role), actors and the evaluator at the learner's (Complete or Failed: they exit 0, so that
their Jobs complete rather than look failed).

A Job is read with a list of one name (a `metadata.name` field selector) at resourceVersion 0:
the API server answers from its cache, and RBAC lets the pods' Role name the Jobs
(`resourceNames`) for a list only with such a selector. An API error is logged, at most once per
LOG_EVERY_SECONDS unless it changes, and the watch goes on: a component never fails for it.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client, config

from surreal.orchestrator.kube.observe import condition, job_state
from surreal.orchestrator.kube.render import JOBSET_SUFFIX, job_names
from surreal.orchestrator.program import ACTOR_ROLE, LEARNER_ROLE
from surreal.runtime.exits import EXIT_NO_ACTORS

log = logging.getLogger(__name__)

POLL_SECONDS = 15.0  # between two looks, on average (uniform in [0.5, 1.5] x this)
LOG_EVERY_SECONDS = 300.0  # the same API error is logged again after this long
REQUEST_TIMEOUT = (5.0, 10.0)  # (connect, read) seconds of one look


@dataclass(frozen=True)
class Ending:
    """The component is to end: exit `code`, because of `reason`."""

    code: int
    reason: str


def watched_job(role: str, experiment: str, queued: bool = False) -> str:
    """The Job a component of `role` watches: the actors' for the learner, the learner's for the
    others (`queued`: the experiment's Jobs are its JobSet's, render.job_names)."""
    names = job_names(experiment, queued)
    return names[ACTOR_ROLE] if role == LEARNER_ROLE else names[LEARNER_ROLE]


def ending_of(role: str, job: Mapping[str, Any]) -> Ending | None:
    """What the watched `job` (its JSON) means for a component of `role`, or None: go on."""
    state = job_state(job)
    name = (job.get("metadata") or {}).get("name", "?")
    cond = condition(job, "Failed") or condition(job, "FailureTarget") or {}
    why = f"{cond.get('reason', '')}: {cond.get('message', '')}".strip(": ")
    if role == LEARNER_ROLE:
        if state != "Failed":
            return None
        return Ending(EXIT_NO_ACTORS, f"no actor is left to feed the learner: the actors' Job {name} "
                                      f"failed{f' ({why})' if why else ''}")  # fmt: skip
    if state == "Complete":
        return Ending(0, f"the learner's Job {name} completed")
    if state == "Failed":
        return Ending(0, f"the learner's Job {name} failed{f' ({why})' if why else ''}")
    return None


def in_cluster_batch_api() -> client.BatchV1Api:
    """The API from the pod's service account (its token is re-read as the kubelet rotates it)."""
    cfg = client.Configuration()
    config.load_incluster_config(client_configuration=cfg)
    return client.BatchV1Api(client.ApiClient(cfg))


class JobWatch:
    """A daemon thread that looks at the watched Job until `ending_of` says the component of `role`
    ends, then calls `on_end(ending)` once and stops. `api()` makes the BatchV1Api (in-cluster by
    default; a test's fake), retried at each look until it can be made."""

    def __init__(
        self,
        role: str,
        namespace: str,
        experiment: str,
        on_end: Callable[[Ending], None],
        *,
        queued: bool = False,
        api: Callable[[], client.BatchV1Api] = in_cluster_batch_api,
        interval: float = POLL_SECONDS,
        log_every: float = LOG_EVERY_SECONDS,
    ) -> None:
        self.role, self.namespace, self.job = role, namespace, watched_job(role, experiment, queued)
        self.on_end, self._make_api, self.interval, self.log_every = on_end, api, interval, log_every
        self._api: client.BatchV1Api | None = None
        self._stopped = threading.Event()
        self._last_error: tuple[str, float] | None = None  # (message, monotonic time logged)
        self.looks = 0  # looks so far, failed ones included
        self._thread = threading.Thread(target=self._run, name="surreal-job-watch", daemon=True)

    def start(self) -> JobWatch:
        log.info("watching Job %s/%s (every ~%.0f s)", self.namespace, self.job, self.interval)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()

    def look(self) -> Ending | None:
        """One look at the Job: the ending it means, or None (go on, or it could not be read)."""
        try:
            if self._api is None:
                self._api = self._make_api()
            found = self._api.list_namespaced_job(
                self.namespace, field_selector=f"metadata.name={self.job}", resource_version="0",
                _request_timeout=REQUEST_TIMEOUT,
            )  # fmt: skip
            jobs = [j for j in self._api.api_client.sanitize_for_serialization(found).get("items") or []
                    if (j.get("metadata") or {}).get("name") == self.job]  # fmt: skip
            if not jobs:
                raise LookupError(f"no Job {self.job} in namespace {self.namespace}")
            ending = ending_of(self.role, jobs[0])
        except Exception as exc:  # noqa: BLE001 - the watch never fails its component
            self._failed(exc)
            return None
        if self._last_error is not None:
            log.info("Job %s/%s can be read again", self.namespace, self.job)
            self._last_error = None
        return ending

    def _failed(self, exc: Exception) -> None:
        message = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        now = time.monotonic()
        last = self._last_error
        if last is None or last[0] != message or now - last[1] >= self.log_every:
            log.warning("cannot read Job %s/%s (the watch goes on): %s", self.namespace, self.job, message)
            self._last_error = (message, now)

    def _run(self) -> None:
        while not self._stopped.is_set():
            ending = self.look()
            self.looks += 1
            if ending is not None and not self._stopped.is_set():
                log.info("%s", ending.reason)
                self.on_end(ending)
                return
            self._stopped.wait(self.interval * random.uniform(0.5, 1.5))


def start(role: str, where: str, on_end: Callable[[Ending], None]) -> JobWatch:
    """Kubernetes' watch for a component of `role` (launcher.start_jobs_watch), started: `where` is
    what follows "kube:" in SURREAL_JOBS_WATCH."""
    namespace, experiment, queued = parse_experiment(where)
    return JobWatch(role, namespace, experiment, on_end, queued=queued).start()


def parse_experiment(value: str) -> tuple[str, str, bool]:
    """(namespace, experiment, queued) from "NAMESPACE/EXPERIMENT", or "NAMESPACE/EXPERIMENT/jobset"
    when its Jobs are its JobSet's (a queued experiment)."""
    namespace, sep, experiment = value.partition("/")
    experiment, _, kind = experiment.partition("/")
    if not (sep and namespace and experiment) or kind not in ("", JOBSET_SUFFIX):
        raise ValueError(f"expected NAMESPACE/EXPERIMENT[/{JOBSET_SUFFIX}], got {value!r}")
    return namespace, experiment, kind == JOBSET_SUFFIX

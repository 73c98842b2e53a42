"""The kube launcher: an experiment's objects applied, watched and removed through the official
`kubernetes` client. A thin layer over `render.py` (what the objects are) and `status.py`
(what the pods say); every API call goes through `kube_errors.call`, so failures are typed errors.

The ConfigMap holding the spec is the root: every other object carries an ownerReference to it, so
deleting it deletes the experiment (the garbage collector cascades), and a create that fails midway
deletes it to leave nothing behind.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from surreal.orchestrator import resize
from surreal.orchestrator.kube import observe as ks
from surreal.orchestrator.kube import render as kr
from surreal.orchestrator.kube.errors import (
    ClusterUnreachable,
    ExperimentExists,
    ExperimentNotFound,
    Forbidden,
    ImageNotSet,
    KubeError,
    NamespaceMissing,
    call,
)
from surreal.orchestrator.kube.exec import Exec, pod_exec
from surreal.orchestrator.kube.pods import EXP_DIR, TB_PORT, Placement
from surreal.orchestrator.kube.portforward import Dial, PortForward, pod_dialer
from surreal.orchestrator.launcher import UsageError
from surreal.orchestrator.program import LEARNER_PORT, ranks_problem
from surreal.provisioner.pools import GPU_RESOURCE
from surreal.runtime.scale import SCALE_FILE
from surreal.spec import ExperimentSpec, SpecError, spec_from_dict

log = logging.getLogger(__name__)

# Contexts and API hosts of clusters that run on this machine: they can use an image loaded with
# `kind load` / `minikube image load`, so `--image` may be left out.
LOCAL_CONTEXT_PREFIXES = ("kind-", "minikube", "docker-desktop", "rancher-desktop", "k3d-", "orbstack")
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "host.docker.internal")
# (connect, read) seconds per API call: a dead cluster fails fast instead of hanging the CLI.
REQUEST_TIMEOUT = (5.0, 60.0)

# Writes scale.json atomically in the learner's container (python3 is in every surreal image).
_WRITE_SCALE = (
    "import json,os,sys; p=sys.argv[1]; t=p+'.tmp'; "
    "open(t,'w').write(json.dumps({'agents': int(sys.argv[2])})); os.replace(t,p)"
)

# Custom resources: kind -> (group, version, plural). JobSet: a queued experiment's Jobs (render.py);
# Workload: what Kueue admits (one per JobSet), read for status and deactivated to resize.
_CUSTOM = {
    "JobSet": ("jobset.x-k8s.io", "v1alpha2", "jobsets"),
    "Workload": ("kueue.x-k8s.io", "v1beta1", "workloads"),
}
# On the root while a queued experiment is resized: the spec and objects to make at the new size and
# those to remove, kept there before anything is deleted, so that `surreal scale` again finishes an
# interrupted resize.
RESIZE_KEY = "resize.json"

# kind -> (api group attribute, method suffix, RBAC resource name used in messages)
_KINDS = {
    "ConfigMap": ("core", "config_map", "configmaps"),
    "Secret": ("core", "secret", "secrets"),
    "Service": ("core", "service", "services"),
    "NetworkPolicy": ("net", "network_policy", "networkpolicies.networking.k8s.io"),
    "PersistentVolumeClaim": ("core", "persistent_volume_claim", "persistentvolumeclaims"),
    "PodDisruptionBudget": ("policy", "pod_disruption_budget", "poddisruptionbudgets.policy"),
    "Job": ("batch", "job", "jobs.batch"),
    "Deployment": ("apps", "deployment", "deployments.apps"),
    # The components' watch of their Jobs (render.watch_access).
    "ServiceAccount": ("core", "service_account", "serviceaccounts"),
    "Role": ("rbac", "role", "roles.rbac.authorization.k8s.io"),
    "RoleBinding": ("rbac", "role_binding", "rolebindings.rbac.authorization.k8s.io"),
}


def is_local_cluster(context: str | None, server: str | None) -> bool:
    """True for kind, minikube, Docker Desktop, ...: clusters whose nodes see local images."""
    if context and context.startswith(LOCAL_CONTEXT_PREFIXES):
        return True
    host = urlparse(server or "").hostname or ""
    return host in LOCAL_HOSTS or host.startswith("127.")


def load_api_client(
    context: str | None = None, kubeconfig: str | None = None
) -> tuple[client.ApiClient, str | None]:
    """An ApiClient from the kubeconfig (optionally one context) or, inside a pod, the in-cluster
    config; returns it with the context name (None in-cluster)."""
    path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or "~/.kube/config"
    if os.path.exists(os.path.expanduser(path)):
        try:
            contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
            names = [c["name"] for c in contexts]
            if context and context not in names:
                raise ClusterUnreachable(
                    f"no context {context!r} in your kubeconfig (contexts: {', '.join(names)})"
                )
            api = config.new_client_from_config(config_file=kubeconfig, context=context)
        except ConfigException as exc:
            raise ClusterUnreachable(f"unusable kubeconfig {path!r}: {exc}") from None
        return api, context or (active or {}).get("name")
    if os.environ.get("KUBERNETES_SERVICE_HOST") and not context:
        cfg = client.Configuration()
        config.load_incluster_config(client_configuration=cfg)
        return client.ApiClient(cfg), None
    raise ClusterUnreachable(
        f"no Kubernetes cluster configured: no kubeconfig at {path!r} and not inside a pod "
        "(create a local cluster with `make kind-up`, or set KUBECONFIG)"
    )


@dataclass(frozen=True)
class Created:
    """What `create` made: the experiment's objects as sent (with ownerReferences)."""

    namespace: str
    objects: tuple[dict[str, Any], ...]


class KubeClient:
    """Experiments on one cluster. Build with `KubeClient.connect(...)`; tests pass a fake
    ApiClient, a `dial` that replaces the API server's port-forward and an `exec_` for its exec."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        context: str | None = None,
        local: bool | None = None,
        dial: Callable[[str, str, int], Dial] | None = None,
        exec_: Exec | None = None,
        delete_timeout: float = 120.0,
        resize_stop_seconds: float = resize.STOP_SECONDS,
        poll_seconds: float = 0.5,
    ) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.policy = client.PolicyV1Api(api_client)
        self.net = client.NetworkingV1Api(api_client)
        self.rbac = client.RbacAuthorizationV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.server = api_client.configuration.host
        self.context = context
        self.local = is_local_cluster(context, self.server) if local is None else local
        self._dial = dial or (lambda pod, ns, port: pod_dialer(self.core, pod, ns, port))
        self._exec = exec_ or pod_exec(self.core)
        self.delete_timeout = delete_timeout
        self.resize_stop_seconds, self.poll_seconds = resize_stop_seconds, poll_seconds

    @classmethod
    def connect(cls, context: str | None = None, kubeconfig: str | None = None) -> KubeClient:
        api, ctx = load_api_client(context, kubeconfig)
        return cls(api, context=ctx)

    # --- plumbing -------------------------------------------------------------------------

    def _call(self, fn: Callable[..., Any], *args: Any, verb: str, resource: str, ns: str | None,
              **kwargs: Any) -> Any:  # fmt: skip
        """One API call; its JSON as dicts. 404 and 409 stay ApiExceptions (their meaning
        depends on the call); every other failure is a KubeError."""
        kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT)
        where = f"the Kubernetes API at {self.server}"
        try:
            result = call(fn, *args, verb=verb, resource=resource, namespace=ns, server=where, **kwargs)
        except ApiException as exc:
            if exc.status in (404, 409):
                raise
            raise api_error(exc, f"{verb} {resource}") from None
        if kwargs.get("_preload_content") is False:  # an answer not read (see `_delete`)
            getattr(result, "release_conn", lambda: None)()
            return None
        return self.api_client.sanitize_for_serialization(result)

    def _method(self, kind: str, action: str) -> tuple[Callable[..., Any], str]:
        """The client's call for `action` on `kind`, taking (name or body, namespace, ...) as the
        built-in kinds' do (custom resources: bound to their group, version and plural)."""
        if kind in _CUSTOM:
            group, version, plural = _CUSTOM[kind]
            fn = getattr(self.custom, f"{'get' if action == 'read' else action}_namespaced_custom_object")
            return (lambda first, ns, *a, **kw: (fn(group, version, ns, plural, first, *a, **kw)),
                    f"{plural}.{group}")  # fmt: skip
        group, suffix, resource = _KINDS[kind]
        return getattr(getattr(self, group), f"{action}_namespaced_{suffix}"), resource

    def _read(self, kind: str, name: str, ns: str) -> dict[str, Any] | None:
        fn, resource = self._method(kind, "read")
        try:
            return self._call(fn, name, ns, verb="get", resource=resource, ns=ns)  # type: ignore[no-any-return]
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _create(self, obj: dict[str, Any]) -> dict[str, Any]:
        fn, resource = self._method(obj["kind"], "create")
        ns = obj["metadata"]["namespace"]
        args = (obj, ns) if obj["kind"] in _CUSTOM else (ns, obj)
        try:
            return self._call(fn, *args, verb="create", resource=resource, ns=ns)  # type: ignore[no-any-return]
        except ApiException as exc:
            if exc.status == 404 and obj["kind"] in _CUSTOM:
                raise KubeError(missing_crd(obj["kind"])) from None
            if exc.status == 404:
                raise NamespaceMissing(ns) from None
            if exc.status == 409:
                raise ExperimentExists(
                    f"{obj['kind']} {obj['metadata']['name']!r} already exists in namespace {ns!r} "
                    "(an experiment of that name exists or was not fully deleted)"
                ) from None
            raise

    def _root(self, name: str, ns: str) -> dict[str, Any]:
        root = self._read("ConfigMap", kr.object_names(name)["spec"], ns)
        if root is None or root["metadata"].get("labels", {}).get("surreal.io/experiment") != name:
            raise ExperimentNotFound(f"no experiment {name!r} in namespace {ns!r}")
        return root

    # --- lifecycle -------------------------------------------------------------------------

    def create(
        self,
        spec: ExperimentSpec,
        *,
        token: str | None = None,
        placement: Mapping[str, Placement] | None = None,
        settings: kr.RenderSettings | None = None,
    ) -> Created:
        """Create every object of `spec`, root first; on any failure delete what was made."""
        objects = kr.render(spec, placement, token=token or kr.new_token(), settings=settings)
        if not spec.image and not self.local:
            raise ImageNotSet(
                f"no --image for the remote cluster {self.context or self.server!r}: its nodes "
                "cannot see a local build; push the image (Dockerfile) and pass --image REF"
            )
        ns = spec.namespace
        self._check_namespace(ns)
        if spec.queue:  # before anything is made: a cluster without JobSet cannot queue it
            self._check_installed("JobSet", ns)
        if self._read("ConfigMap", objects[0]["metadata"]["name"], ns) is not None:
            raise ExperimentExists(
                f"experiment {spec.name!r} already exists in namespace {ns!r} "
                f"(`surreal delete {spec.name}` first, or pick another name)"
            )
        root = self._create(objects[0])
        sent = [objects[0]]
        try:
            for obj in objects[1:]:
                owned = with_owner(obj, root)
                self._create(owned)
                sent.append(owned)
        except BaseException:
            self._rollback(root["metadata"]["name"], ns)
            raise
        return Created(ns, tuple(sent))

    def _check_namespace(self, ns: str) -> None:
        try:
            self._call(self.core.read_namespace, ns, verb="get", resource="namespaces", ns=None)
        except ApiException as exc:
            if exc.status == 404:
                raise NamespaceMissing(ns) from None
            raise
        except Forbidden:
            pass  # a namespaced Role cannot read Namespace objects; creating the root will tell

    def _check_installed(self, kind: str, ns: str) -> None:
        try:
            self._list_custom(kind, ns)
        except ApiException as exc:
            if exc.status == 404:
                raise KubeError(missing_crd(kind)) from None
            raise

    def _list_custom(self, kind: str, ns: str) -> list[dict[str, Any]]:
        group, version, plural = _CUSTOM[kind]
        result = self._call(self.custom.list_namespaced_custom_object, group, version, ns, plural,
                            verb="list", resource=f"{plural}.{group}", ns=ns)  # fmt: skip
        return list(result.get("items") or [])

    def _patch(self, kind: str, name: str, ns: str, body: dict[str, Any]) -> dict[str, Any]:
        fn, resource = self._method(kind, "patch")
        return self._call(fn, name, ns, body, verb="patch", resource=resource, ns=ns)  # type: ignore[no-any-return]

    def workloads(self, jobset: str, ns: str) -> list[dict[str, Any]]:
        """Kueue's Workloads of the JobSet `jobset` (by owner); none where Kueue is not installed."""
        try:
            found = self._list_custom("Workload", ns)
        except (ApiException, Forbidden):  # no Kueue here, or no right to read it: nothing to say
            return []
        return [w for w in found
                if any(r.get("kind") == "JobSet" and r.get("name") == jobset
                       for r in w["metadata"].get("ownerReferences") or [])]  # fmt: skip

    def delete(self, name: str, namespace: str, *, wait: bool = True) -> None:
        """Delete the root; the garbage collector deletes the rest (Foreground: the root goes
        last, so with `wait` the experiment is gone when this returns)."""
        root = self._root(name, namespace)
        if root["metadata"]["labels"].get("app.kubernetes.io/managed-by") == "Helm":
            raise KubeError(
                f"experiment {name!r} was installed with Helm: `helm uninstall {name} -n {namespace}`"
            )
        self._delete_root(root["metadata"]["name"], namespace, wait=wait)

    def _rollback(self, root: str, ns: str) -> None:
        try:
            self._delete_root(root, ns, wait=True)
        except Exception as exc:  # the error that caused the rollback is the one to report
            log.error("could not remove %r after a failed create: %s", root, exc)

    def _delete_root(self, root: str, ns: str, *, wait: bool) -> None:
        self._delete("ConfigMap", root, ns, wait=wait, still=f"{root!r} is still being deleted after "
                     f"{self.delete_timeout:.0f} s (the garbage collector goes on; see kubectl get all "
                     "-l surreal.io/experiment)")  # fmt: skip

    def _delete(self, kind: str, name: str, ns: str, *, wait: bool, still: str) -> None:
        """Delete `name` (Foreground: what it owns goes first); with `wait`, until it is gone, or
        KubeError(`still`) after delete_timeout. Already gone is fine."""
        fn, resource = self._method(kind, "delete")
        try:
            # The answer is not read: a Service's is a Status on many servers, where the client
            # expects a Service and fails to decode it (kubernetes-client/java#3972, the same spec).
            self._call(fn, name, ns, verb="delete", resource=resource, ns=ns, propagation_policy="Foreground",
                       _preload_content=False)  # fmt: skip
        except ApiException as exc:
            if exc.status != 404:
                raise
        deadline = time.monotonic() + self.delete_timeout
        while wait and self._read(kind, name, ns) is not None:
            if time.monotonic() > deadline:
                raise KubeError(still)
            time.sleep(self.poll_seconds)

    def scale(self, name: str, namespace: str, agents: int, learner_pods: int | None = None) -> int:
        """Run `agents` logical agents: in place by resize.py's rule (`_InPlace`), or a queued
        experiment by its resize. Returns the actor pods."""
        steps = _InPlace(self, name, namespace, self.spec_of(name, namespace))
        if not steps.spec.get("queue"):
            resize.scale_in_place(steps, agents, learner_pods)
        elif (problem := steps.problem(agents)) is not None:  # what the in-place rule checks first
            raise UsageError(f"experiment {name!r}: {problem}")
        else:
            self.resize(name, namespace, agents, learner_pods)
        return agents // steps.per_pod

    def resize(self, name: str, ns: str, agents: int, learner_pods: int | None = None) -> None:
        """Resize a queued experiment (one JobSet, one Workload) to `agents`, and `learner_pods`
        where given, by the rule of orchestrator/resize.py (suspend, the learner
        saves and leaves, made again at the new size, admitted again, the learner resumes: 0
        updates lost), its steps `_QueuedResize`'s. A Job's size cannot change while it exists, even
        suspended, hence the new JobSet, which Kueue admits as a new Workload."""
        root = self._root(name, ns)
        if root["metadata"]["labels"].get("app.kubernetes.io/managed-by") == "Helm":
            raise KubeError(f"experiment {name!r} was installed with Helm: its size is the chart's "
                            f"(helm uninstall, then install with --set agents={agents})")  # fmt: skip
        steps = _QueuedResize(self, name, ns, root, agents, learner_pods)
        resize.resize(steps, stop_seconds=self.resize_stop_seconds, poll_seconds=self.poll_seconds,
                      error=KubeError)  # fmt: skip

    def _suspend(self, name: str, ns: str) -> None:
        """Deactivate the JobSet's Workloads (Kueue then evicts them and suspends the JobSet), or,
        where Kueue has made none (not installed, not seen it yet), suspend the JobSet itself."""
        workloads = self.workloads(name, ns)
        for workload in workloads:
            self._patch("Workload", workload["metadata"]["name"], ns, {"spec": {"active": False}})
        if not workloads:
            self._patch("JobSet", name, ns, {"spec": {"suspend": True}})

    # --- observation -----------------------------------------------------------------------

    def spec_of(self, name: str, namespace: str, root: dict[str, Any] | None = None) -> dict[str, Any]:
        """The spec as the root holds it (`root`: already read)."""
        data = yaml.safe_load((root or self._root(name, namespace))["data"]["spec.yaml"])
        return data if isinstance(data, dict) else {}

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        result = self._call(self.core.list_namespaced_pod, namespace, label_selector=selector,
                            verb="list", resource="pods", ns=namespace)  # fmt: skip
        return list(result.get("items") or [])

    def jobs(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        result = self._call(self.batch.list_namespaced_job, namespace, label_selector=selector,
                            verb="list", resource="jobs.batch", ns=namespace)  # fmt: skip
        return list(result.get("items") or [])

    def list_experiments(self, namespace: str) -> list[dict[str, Any]]:
        """One row per experiment in `namespace`: name, algo, env, agents, phase, managed_by."""
        roots = self._call(self.core.list_namespaced_config_map, namespace,
                           label_selector="app.kubernetes.io/name=surreal,surreal.io/component=spec",
                           verb="list", resource="configmaps", ns=namespace)  # fmt: skip
        pods = self.pods(namespace, "app.kubernetes.io/name=surreal")
        jobs = self.jobs(namespace, "app.kubernetes.io/name=surreal")
        return [ks.list_row(root, pods, jobs) for root in roots.get("items") or []]

    def status(self, name: str, namespace: str, *, learner: bool = True) -> dict[str, Any]:
        """The contract's status object: metrics from the learner over a port-forward while it
        runs, from its termination message once it ended; the phase from its Job."""
        root = self._root(name, namespace)
        spec = self.spec_of(name, namespace, root)
        pods = self.pods(namespace, f"surreal.io/experiment={name}")
        jobs = self.jobs(namespace, f"surreal.io/experiment={name}")
        jobset: dict[str, Any] | None = None
        admission = None
        if spec.get("queue"):
            jobset = self._read("JobSet", name, namespace)
            annotations = root["metadata"].get("annotations") or {}
            admission = ks.admission(jobset, self.workloads(name, namespace) if jobset else [],
                                     annotations.get(ks.RESIZE_ANNOTATION))  # fmt: skip
        metrics: dict[str, Any] = {}
        problem = "not asked"
        if learner:
            metrics, problem = self.learner_status(name, namespace, pods)
        return ks.status(spec, pods, metrics, problem, jobs=jobs, jobset=jobset, admission=admission)

    def learner_status(self, name: str, ns: str, pods: list[dict[str, Any]]) -> tuple[dict, str]:
        """(the learner's Status RPC answer, "") or ({}, why not)."""
        from surreal.protocol.client import LearnerClient, ProtocolError

        pod = ks.ready_pod(pods, "learner")
        if pod is None:
            return {}, "the learner pod is not ready"
        secret = self._read("Secret", kr.object_names(name)["token"], ns) or {}
        token = base64.b64decode((secret.get("data") or {}).get("token", "")).decode()
        with PortForward(self._dial(pod, ns, LEARNER_PORT)) as forward:
            learner_client = LearnerClient(forward.address, token)
            try:
                return learner_client.status(timeout=10.0), ""
            except ProtocolError as exc:
                return {}, f"learner status: {exc.code} {'; '.join(forward.errors)}".strip()
            finally:
                learner_client.close()

    def logs(self, name: str, namespace: str, component: str = "learner", *, follow: bool = False,
             previous: bool = False, tail: int | None = 100) -> Iterator[str]:  # fmt: skip
        """Lines of one component's log: a role (its first pod), "actor-N" (the N-th actor pod
        by name) or a pod name; `previous` reads the crashed container before the restart."""
        pods = self.pods(namespace, f"surreal.io/experiment={name}")
        pod, container = ks.pick_pod(pods, component, name)
        try:
            # Not self._call: the raw response streams, so `follow` yields lines as they come.
            resp = call(self.core.read_namespaced_pod_log, pod, namespace, container=container,
                        follow=follow, previous=previous, tail_lines=tail, _preload_content=False,
                        verb="get", resource="pods/log", namespace=namespace,
                        server=f"the Kubernetes API at {self.server}")  # fmt: skip
        except ApiException as exc:
            if exc.status == 400 and previous:
                raise KubeError(f"pod {pod!r} has no previous (crashed) container") from None
            raise KubeError(f"cannot read the log of pod {pod!r}: {exc.reason}") from None
        yield from _lines(resp)

    def tensorboard(self, name: str, namespace: str, local_port: int = 6006) -> PortForward:
        """A local port forwarded to the experiment's TensorBoard pod."""
        self._root(name, namespace)
        pod = ks.ready_pod(self.pods(namespace, f"surreal.io/experiment={name}"), "tensorboard")
        if pod is None and self.spec_of(name, namespace).get("queue"):
            raise KubeError(
                f"experiment {name!r} is queued, so its TensorBoard holds no pod until asked: "
                f"kubectl scale deployment {kr.object_names(name)['tensorboard']} -n {namespace} "
                "--replicas=1 (it starts on the learner's node, once the learner runs)"
            )
        if pod is None:
            raise KubeError(
                f"experiment {name!r} has no ready TensorBoard pod (it needs storage 'pvc'; "
                f"kubectl get pods -n {namespace} -l surreal.io/component=tensorboard)"
            )
        return PortForward(self._dial(pod, namespace, TB_PORT), local_port)

    def tb_archive(self, name: str, namespace: str) -> bytes:
        """The learner's TensorBoard event files, as a tar archive of its `tb/` folder, as
        `kubectl cp` reads it: in the learner container while it runs (with either storage), in
        the TensorBoard pod, which mounts the same claim, once the run has ended."""
        self._root(name, namespace)
        pods = self.pods(namespace, f"surreal.io/experiment={name}")
        for role in ("learner", "tensorboard"):
            pod = ks.ready_pod(pods, role)
            if pod is not None:
                return self._exec(pod, namespace, role, ["tar", "cf", "-", "-C", EXP_DIR, "tb"])
        raise KubeError(
            f"experiment {name!r}: neither its learner nor its TensorBoard pod is ready to read the "
            "events from"
        )


def api_error(exc: ApiException, action: str) -> KubeError:
    """Any other refusal, as one line: what we tried and what the API server said."""
    message = ""
    try:
        message = json.loads(exc.body or "{}").get("message", "")
    except (ValueError, AttributeError):
        pass
    return KubeError(f"cannot {action}: {exc.status} {exc.reason}{': ' + message if message else ''}")


def missing_crd(kind: str) -> str:
    group = _CUSTOM[kind][0]
    what = {"JobSet": "JobSet (https://jobset.sigs.k8s.io; --queue makes the experiment one JobSet, "
                      "which Kueue admits as one unit)"}.get(kind, kind)  # fmt: skip
    return f"this cluster does not serve {group}: install {what}"


def placement_of(jobset: Mapping[str, Any]) -> dict[str, Placement]:
    """Each role's placement as its pods in `jobset` have it (nodeSelector, tolerations, GPUs): what
    the pools file or provider chose at create, which a resize keeps."""
    out: dict[str, Placement] = {}
    for rjob in jobset["spec"]["replicatedJobs"]:
        role = ks.role_of(rjob["template"])
        pod = rjob["template"]["spec"]["template"]["spec"]
        limits = (pod["containers"][0].get("resources") or {}).get("limits") or {}
        selector, tolerations = dict(pod.get("nodeSelector") or {}), list(pod.get("tolerations") or [])
        out.setdefault(role, Placement(selector, tolerations, int(limits.get(GPU_RESOURCE, 0))))
    return out


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


class _InPlace:
    """resize.py's in-place steps on Kubernetes: the root gets the count (for `list`; first, so that
    a Role without patch on configmaps fails before anything has changed) and the learner its
    scale.json, written in its container, which it reads before its next update; then the actors'
    Indexed Job its completions and parallelism, together (an elastic Indexed Job: pods of the
    indexes dropped are stopped, new indexes start)."""

    def __init__(self, kube: KubeClient, name: str, ns: str, spec: dict[str, Any]) -> None:
        self.kube, self.name, self.ns, self.spec = kube, name, ns, spec
        self.learner_pods, self.per_pod = int(spec.get("learner_pods", 1)), int(spec.get("agents_per_pod", 1))

    def problem(self, agents: int) -> str | None:
        # A pod's fragments are agents_per_pod's, which create checked against the message limit and
        # scale does not change (the chart's specs name no resolved spaces to check them with).
        return resize.pods_problem(agents, self.per_pod) or ranks_problem(
            int(self.spec.get("learners", 1)), agents // self.per_pod, "pod"
        )

    def not_running(self) -> str | None:
        return None  # an ended experiment's learner pod is not ready: tell_learner says so

    def tell_learner(self, agents: int) -> None:
        learner = ks.ready_pod(self.kube.pods(self.ns, f"surreal.io/experiment={self.name}"), "learner")
        if learner is None:
            raise KubeError(
                f"experiment {self.name!r}: its learner pod is not ready, and it must take the new count "
                "before the actors come (scale again once it runs)"
            )
        annotation = {"metadata": {"annotations": {ks.AGENTS_ANNOTATION: str(agents)}}}
        self.kube._patch("ConfigMap", kr.object_names(self.name)["spec"], self.ns, annotation)
        self.kube._exec(learner, self.ns, "learner", ["python3", "-c", _WRITE_SCALE,
                                                      f"{EXP_DIR}/{SCALE_FILE}", str(agents)])  # fmt: skip

    def learner_took(self, agents: int) -> bool:
        return True  # the file is in its container: the exec returned once it was written

    def resize_actors(self, agents: int) -> str:
        replicas = agents // self.per_pod
        try:
            patch = {"spec": {"completions": replicas, "parallelism": replicas}}
            self.kube._patch("Job", kr.object_names(self.name)["actor"], self.ns, patch)
        except ApiException as exc:
            if exc.status == 404:
                raise ExperimentNotFound(f"experiment {self.name!r} has no actor Job") from None
            raise
        return f"{replicas} actor pods"

    def actors_run(self, agents: int) -> bool:
        return True  # the Job controller starts and stops them (status shows them)


class _QueuedResize:
    """resize.py's steps on Kubernetes. `begin` renders the experiment at its current and at its
    new size (with the placement its JobSet has) and keeps on the root what differs: the objects to
    make (the JobSet always: a Job's size cannot change; with --learner-pods also the learner's
    Services, NetworkPolicy and budget) and those to remove, with the new spec (RESIZE_KEY), and
    says it (ks.RESIZE_ANNOTATION). Suspending deactivates Kueue's Workload. `remake` deletes the
    old objects (the JobSet first), writes the spec, and creates the new (the JobSet last,
    suspended, for Kueue to admit)."""

    def __init__(self, kube: KubeClient, name: str, ns: str, root: dict[str, Any], agents: int,
                 learner_pods: int | None) -> None:  # fmt: skip
        self.kube, self.name, self.ns, self.root = kube, name, ns, root
        self.agents, self.new_learner_pods = agents, learner_pods
        self.config = kr.object_names(name)["spec"]
        self.plan: dict[str, Any] = {}

    def begin(self) -> bool:
        stored = (self.root.get("data") or {}).get(RESIZE_KEY)
        jobset = self.kube._read("JobSet", self.name, self.ns)
        if jobset is None and stored is None:
            raise ExperimentNotFound(f"experiment {self.name!r} has no JobSet (was it created with --queue?)")
        self.plan = json.loads(stored) if stored else self._plan(jobset)
        self.kube._patch("ConfigMap", self.config, self.ns, {
            "metadata": {"annotations": {ks.RESIZE_ANNOTATION: str(self.agents)}},
            "data": {RESIZE_KEY: json.dumps(self.plan)},
        })  # fmt: skip
        return jobset is not None

    def _plan(self, jobset: Any) -> dict[str, Any]:
        data = self.kube.spec_of(self.name, self.ns, self.root)
        changed = {"agents": self.agents}
        if self.new_learner_pods is not None:
            changed["learner_pods"] = self.new_learner_pods
        try:
            current, new = spec_from_dict(dict(data)), spec_from_dict({**data, **changed})
            placement = placement_of(jobset)
            old = {_key(o): o for o in kr.render(current, placement, token="-")}
            made = {_key(o): o for o in kr.render(new, placement, token="-")}
        except (SpecError, kr.RenderError) as exc:
            raise UsageError(f"experiment {self.name!r}: {exc}") from None
        differ = [k for k, o in made.items() if k[0] == "JobSet" or (k[0] != "ConfigMap" and old.get(k) != o)]
        remove = [k for k in old if k not in made or (k in differ)]
        return {
            "spec.yaml": made[("ConfigMap", self.config)]["data"]["spec.yaml"],
            "remove": sorted(remove, key=lambda k: k[0] != "JobSet"),  # the JobSet (its pods) first
            "make": [with_owner(made[k], self.root) for k in sorted(differ, key=lambda k: k[0] == "JobSet")],
        }

    def suspend(self) -> None:
        self.kube._suspend(self.name, self.ns)

    def learner_pods(self) -> list[str]:
        return [p["metadata"]["name"] for p in self.kube.pods(self.ns, f"surreal.io/experiment={self.name}")
                if ks.role_of(p) == "learner"]  # fmt: skip

    def remake(self) -> None:
        kube, ns = self.kube, self.ns
        for kind, name in self.plan["remove"]:
            still = (f"{kind} {name!r} is still being deleted after {kube.delete_timeout:.0f} s; "
                     "`surreal scale` again finishes the resize once it is gone")  # fmt: skip
            kube._delete(kind, name, ns, wait=True, still=still)
        kube._patch("ConfigMap", self.config, ns, {
            "metadata": {"annotations": {ks.AGENTS_ANNOTATION: str(self.agents)}},
            "data": {"spec.yaml": self.plan["spec.yaml"]},
        })  # fmt: skip
        for obj in self.plan["make"]:
            try:
                kube._create(obj)
            except ExperimentExists:
                pass  # made by an earlier try that was cut short after the create

    def end(self) -> None:
        self.kube._patch("ConfigMap", self.config, self.ns, {
            "metadata": {"annotations": {ks.RESIZE_ANNOTATION: None}}, "data": {RESIZE_KEY: None},
        })  # fmt: skip


def with_owner(obj: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """`obj` owned by the created root. blockOwnerDeletion lets a Foreground delete of the root
    wait for it (RBAC: update on configmaps/finalizers)."""
    ref = {
        "apiVersion": root.get("apiVersion", "v1"),
        "kind": root.get("kind", "ConfigMap"),
        "name": root["metadata"]["name"],
        "uid": root["metadata"]["uid"],
        "blockOwnerDeletion": True,
    }
    return {**obj, "metadata": {**obj["metadata"], "ownerReferences": [ref]}}


def _lines(resp: Any) -> Iterator[str]:
    buffer = b""
    try:
        for chunk in resp.stream(4096):
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                yield line.decode(errors="replace")
        if buffer:
            yield buffer.decode(errors="replace")
    finally:
        resp.release_conn()


__all__ = [
    "ClusterUnreachable",
    "Created",
    "ExperimentExists",
    "ExperimentNotFound",
    "ImageNotSet",
    "KubeError",
    "KubeClient",
    "NamespaceMissing",
    "is_local_cluster",
    "load_api_client",
    "with_owner",
]

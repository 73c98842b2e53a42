"""The Kubernetes objects of an experiment, rendered from its program. Pure: no cluster, no I/O.

`render(spec, placement, token=...)` turns `make_program(spec)` into plain dicts (the API's JSON):
ConfigMap (the spec; the root that owns every other object once applied), Secret (the token),
NetworkPolicy, the ServiceAccount, Role and RoleBinding of the components' watch of their Jobs
(watch.py), the learner's PersistentVolumeClaim, Service, PodDisruptionBudget and Job, the
actors' Indexed Job, the evaluator's Job, an off-policy run's replay shards (an Indexed Job, its
headless Service and NetworkPolicy), TensorBoard Service + Deployment. Every container runs
its component's argv with exactly its env, so a pod cannot tell it is not a local subprocess.
`surreal create --backend kube --dry-run -o yaml` prints them (output.py), the kube launcher
applies them, and helm/surreal renders the same objects.

An experiment is batch work (docs/decisions.md, "Run-to-completion objects"): learner, actors and
evaluator are Indexed batch/v1 Jobs whose pods exit when the run is done, so the Jobs complete and
free their nodes and GPUs. Each Job carries its role's failure policy (policy.py,
`job_failure_policy`); the actors' pod index is the worker index (`scale` patches completions and
parallelism together); each component watches the Job it depends on (watch.py).
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from surreal.orchestrator.kube import pods as pods
from surreal.orchestrator.policy import RolePolicy, policy_of
from surreal.orchestrator.program import (
    ENV_FIRST_LEARNER_POD,
    LEARNER_PORT,
    REPLAY_ROLE,
    Component,
    Program,
    Target,
    envs_problem,
    fragment_problem,
    learner_ports,
    make_program,
    pod_split,
    rank_addrs,
    ranks_problem,
    replay_shards,
)
from surreal.provisioner.placement import ROLES, Placement
from surreal.spec import ExperimentSpec

# Used when the spec names no image: what `make image` builds and `make kind-load` loads.
DEFAULT_IMAGE = "surreal:local"
# TensorBoard is not a program component (it runs no surreal code), so its size is set here.
TENSORBOARD_RESOURCES = {"cpu": "250m", "memory": "512Mi"}
# SIGTERM -> SIGKILL for a learner pod: it finishes the update it is in, then writes its checkpoint.
# Measured on a CPU learner (benchmarks/checkpoint_write.py, learner_update.py): Breakout's update
# 4.9 s + its 19 MiB checkpoint 0.15 s at worst; HalfCheetah at 512 agents 0.65 s + 3 ms. 30 s
# leaves a 6x margin and stays within what spot capacity gives (about 30 s on GKE).
LEARNER_GRACE_SECONDS = 30
# Kueue's label: the LocalQueue that admits the experiment (`--queue`): on its JobSet, nowhere else.
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# With a queue the three Jobs are one JobSet, which Kueue admits as one Workload (docs/decisions.md,
# "One admission: a JobSet").
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
JOB_ROLES = ("learner", "actor", "evaluator")  # the roles that run as Jobs, in the JobSet's order
# Pod 0's control store, where the learner pods' agents agree on each group (ranks.py).
RANKS_CONTROL_PORT = 29400
# Every replay shard's port: each shard is a pod of its own, `<job>-<index>.NAME-replay`.
REPLAY_PORT = 7000
# The components' SURREAL_JOBS_WATCH ends with it when their Jobs are a JobSet's (watch.py).
JOBSET_SUFFIX = "jobset"


class RenderError(ValueError):
    """A spec that cannot become Kubernetes objects; the message names the problem."""


@dataclass(frozen=True)
class RenderSettings:
    """Cluster-side choices that are not part of the experiment spec (Helm values mirror them)."""

    # "pvc": a PersistentVolumeClaim per learner, so checkpoints survive a rescheduled pod and
    # TensorBoard can read the events; "emptyDir": storage that dies with the pod, no TensorBoard
    # (for clusters without a default StorageClass).
    storage: str = "pvc"
    # Size of the learner's claim (a Kubernetes quantity).
    storage_size: str = "2Gi"
    # StorageClass of the claim; "" uses the cluster's default class.
    storage_class: str = ""
    # imagePullPolicy of every container; IfNotPresent also works for images loaded into kind.
    image_pull_policy: str = "IfNotPresent"
    # Per-role resource overrides, e.g. {"actor": {"requests": {...}, "limits": {...}}}; roles not
    # named keep the program's sizes (requests = limits).
    resources: Mapping[str, Mapping[str, Mapping[str, str]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.storage not in ("pvc", "emptyDir"):
            raise RenderError(f"storage must be 'pvc' or 'emptyDir', got {self.storage!r}")
        unknown = set(self.resources) - set(ROLES)
        if unknown:
            raise RenderError(f"resources for unknown roles {sorted(unknown)} (roles: {ROLES})")


def object_names(name: str) -> dict[str, str]:
    """Object name per part of experiment `name` (the learner's Service shares its name)."""
    return {
        "spec": f"{name}-spec",
        "token": f"{name}-token",
        "learner": f"{name}-learner",
        "actor": f"{name}-actor",
        "evaluator": f"{name}-evaluator",
        "tensorboard": f"{name}-tensorboard",
        "claim": f"{name}-data",  # the learner's checkpoints, status and events
        # Learner ranks across pods (--learner-pods): pods 1.. of the learner, and the headless
        # Service that gives every learner pod a stable name (`subdomain`).
        "learner-peers": f"{name}-learner-peers",
        "ranks": f"{name}-ranks",
        "watch": f"{name}-watch",  # the components' ServiceAccount, Role and RoleBinding
        # An off-policy run's replay shards: their Indexed Job, and the headless Service (and the
        # NetworkPolicy) of the same name that gives each shard pod a stable name.
        "replay": f"{name}-replay",
    }


def job_names(name: str, queued: bool) -> dict[str, str]:
    """The Job of each role (JOB_ROLES): `NAME-ROLE`, or in a queued experiment's JobSet (named
    after the experiment) the name its controller gives it, `<jobset>-<replicatedJob>-<index>`."""
    parts = (*JOB_ROLES, "learner-peers", REPLAY_ROLE)
    if queued:
        return {part: f"{name}-{part}-0" for part in parts}
    names = object_names(name)
    return {part: names[part] for part in parts}


def learner_pod_hosts(spec: ExperimentSpec) -> list[str]:
    """Each learner pod's stable name (--learner-pods > 1), `<job>-<index>.<subdomain>`
    (ranks_service): pod 0 is the learner Job's, pods 1.. the peers Job's."""
    names, jobs = object_names(spec.name), job_names(spec.name, bool(spec.queue))
    peers = [f"{jobs['learner-peers']}-{i}" for i in range(spec.learner_pods - 1)]
    return [f"{host}.{names['ranks']}" for host in (f"{jobs['learner']}-0", *peers)]


def labels(name: str, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "surreal",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": "surreal",
        "surreal.io/experiment": name,
        "surreal.io/component": component,
    }


def selector(name: str, component: str) -> dict[str, str]:
    return {"surreal.io/experiment": name, "surreal.io/component": component}


def new_token() -> str:
    return secrets.token_urlsafe(32)


def kube_spec(spec: ExperimentSpec) -> ExperimentSpec:
    """The spec as the pods see it: backend kube and the image that actually runs."""
    return dataclasses.replace(spec, backend="kube", image=spec.image or DEFAULT_IMAGE)


def replay_hosts(spec: ExperimentSpec) -> list[str]:
    """Each replay shard pod's stable name, `<job>-<index>.NAME-replay` (none for an algorithm
    without replay)."""
    job, service = job_names(spec.name, bool(spec.queue))[REPLAY_ROLE], object_names(spec.name)[REPLAY_ROLE]
    return [f"{job}-{i}.{service}" for i in range(replay_shards(spec))]


def kube_target(spec: ExperimentSpec) -> Target:
    if spec.learner_pods == 1:
        # The Service's short name (every pod of the experiment lives in its namespace), a port per
        # learner rank: the ranks run in the learner's pod, rank r on LEARNER_PORT + r.
        learner_addr = rank_addrs(object_names(spec.name)["learner"], LEARNER_PORT, spec.learners)
        control = ""
    else:  # each learner pod's ranks at its own name, a port each from LEARNER_PORT
        hosts = learner_pod_hosts(spec)
        local = spec.learners // spec.learner_pods
        learner_addr = ",".join(rank_addrs(host, LEARNER_PORT, local) for host in hosts)
        control = f"{hosts[0]}:{RANKS_CONTROL_PORT}"
    return Target(
        replay_addr=",".join(f"{host}:{REPLAY_PORT}" for host in replay_hosts(spec)),
        spec_path=pods.SPEC_PATH,
        learner_addr=learner_addr,
        learner_pods=spec.learner_pods,
        ranks_control=control,
        bind_host="0.0.0.0",
        exp_dir=pods.EXP_DIR,
        command=("surreal",),
        token_file=pods.TOKEN_PATH,  # the mounted Secret, as locally: never in argv or env
        termination_log=pods.TERMINATION_LOG,
        # the components' watch (watch.py) of Jobs named as job_names() says
        jobs_watch=f"kube:{spec.namespace}/{spec.name}" + (f"/{JOBSET_SUFFIX}" if spec.queue else ""),
    )


def check_capacity(spec: ExperimentSpec) -> None:
    if spec.agents % spec.agents_per_pod:
        below = spec.agents - spec.agents % spec.agents_per_pod
        hint = [str(n) for n in (below, below + spec.agents_per_pod) if n > 0]
        raise RenderError(
            f"agents ({spec.agents}) must be a multiple of agents_per_pod ({spec.agents_per_pod}) "
            f"on Kubernetes, where every actor pod hosts agents_per_pod agents "
            f"(use --agents {' or '.join(hint)})"
        )


def job_failure_policy(container: str, policy: RolePolicy) -> dict[str, Any]:
    """The failure policy of a role (policy.py) as its Job's fields: the budget as backoffLimit (or
    backoffLimitPerIndex: one crashing actor fails no other), disruptions ignored (a drained,
    preempted or evicted node, and the exits of a clean stop), fatal exits failing the Job."""

    def exits(codes: tuple[int, ...]) -> dict[str, Any]:
        return {"containerName": container, "operator": "In", "values": list(codes)}

    rules: list[dict[str, Any]] = [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
    ]
    if policy.disruption_exits:
        rules.append({"action": "Ignore", "onExitCodes": exits(policy.disruption_exits)})
    if policy.fatal_exits:
        rules.append({"action": "FailJob", "onExitCodes": exits(policy.fatal_exits)})
    budget = "backoffLimitPerIndex" if policy.per_index else "backoffLimit"
    return {budget: policy.retries, "podFailurePolicy": {"rules": rules}}


def jobset_failure_policy(parts: Sequence[str] = JOB_ROLES) -> dict[str, Any]:
    """What a failed Job of a queued experiment's JobSet does (policy.py's `fails_experiment`): the
    learner's or the actors' fails the JobSet; the evaluator's restarts it without counting (JobSet
    has no rule that ignores a failed Job), the learner resuming from the checkpoint it saves on
    SIGTERM. No other failure restarts it (maxRestarts 0)."""

    def role(part: str) -> str:  # the learner's peers are the learner
        return "learner" if part == "learner-peers" else part

    def action(part: str) -> str:
        return "FailJobSet" if policy_of(role(part)).fails_experiment else "RestartJobSetAndIgnoreMaxRestarts"

    rules = [
        {"name": f"{part}-failed", "action": action(part), "targetReplicatedJobs": [part]}
        for part in parts
    ]  # fmt: skip
    return {"maxRestarts": 0, "rules": rules}


def kube_program(spec: ExperimentSpec) -> Program:
    check_capacity(spec)
    split = pod_split(spec.agents, spec.agents_per_pod)
    problem = ranks_problem(spec.learners, len(split), "pod")
    if problem is not None:
        raise RenderError(f"{problem}: raise --agents or lower agents_per_pod ({spec.agents_per_pod})")
    knob = f"agents_per_pod ({spec.agents_per_pod})"
    problem = envs_problem(spec, split, knob) or fragment_problem(spec, split, knob)
    if problem is not None:
        raise RenderError(problem)
    return make_program(kube_spec(spec), kube_target(spec), split)


def render(
    spec: ExperimentSpec,
    placement: Mapping[str, Placement] | None = None,
    *,
    token: str,
    settings: RenderSettings | None = None,
) -> list[dict[str, Any]]:
    """Every object of the experiment, root (the ConfigMap) first, without ownerReferences (the
    root's uid exists only once it is created; the kube launcher adds them)."""
    if not token:
        raise RenderError("an empty token would let anyone reach the learner")
    settings = settings or RenderSettings()
    placement = dict(placement or {})
    unknown = set(placement) - set(ROLES)
    if unknown:
        raise RenderError(f"placement for unknown roles {sorted(unknown)} (roles: {ROLES})")
    spec = kube_spec(spec)
    program = kube_program(spec)
    ctx = _Ctx(spec, settings, placement)
    actors = [c for c in program.components if c.role == "actor"]
    # One pod template serves every actor worker; the program must not tell them apart by env.
    if len({(c.env, c.cpu, c.memory_mb) for c in actors}) != 1:
        raise RenderError("actor workers differ in env or size; one Deployment cannot run them")
    pvc = settings.storage == "pvc"
    objects = [ctx.config_map(), ctx.secret(token), ctx.network_policy(), *ctx.watch_access()]
    if pvc:
        objects.append(ctx.claim())
    learner = program.component("learner")
    jobs = [ctx.job(learner, 1)]
    if spec.learner_pods > 1:  # pods 1.. of the learner: the same, but pod 1 first and no claim
        peer = dataclasses.replace(learner, env={**learner.env, ENV_FIRST_LEARNER_POD: "1"})
        jobs.append(ctx.job(peer, spec.learner_pods - 1, part="learner-peers"))
    shards = [c for c in program.components if c.role == REPLAY_ROLE]
    if shards:  # one template serves every shard: its index is its pod's completion index
        jobs.append(ctx.job(shards[0], len(shards)))
    jobs += [ctx.job(actors[0], len(actors)), ctx.job(program.component("evaluator"), 1)]
    objects.append(ctx.service("learner", pods.rank_ports(ctx.learner_ports)))
    if spec.learner_pods > 1:
        objects.append(ctx.ranks_service())
    if shards:
        objects += [ctx.replay_service(), ctx.replay_network_policy()]
    objects += [ctx.disruption_budget(), *([ctx.jobset(jobs)] if spec.queue else jobs)]
    if pvc:  # TensorBoard reads the learner's claim
        objects += [ctx.service("tensorboard", {"http": pods.TB_PORT}), ctx.tensorboard()]
    return objects


@dataclass(frozen=True)
class _Ctx:
    spec: ExperimentSpec
    settings: RenderSettings
    placement: Mapping[str, Placement]

    @property
    def names(self) -> dict[str, str]:
        return object_names(self.spec.name)

    def meta(self, name: str, component: str) -> dict[str, Any]:
        return {
            "name": name,
            "namespace": self.spec.namespace,
            "labels": labels(self.spec.name, component),
        }

    def config_map(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": self.meta(self.names["spec"], "spec"),
            "data": {"spec.yaml": self.spec.to_yaml()},
        }

    def secret(self, token: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": self.meta(self.names["token"], "token"),
            "type": "Opaque",
            "stringData": {"token": token},
        }

    def watch_access(self) -> list[dict[str, Any]]:
        """What the components' watch of the experiment's Jobs (watch.py) may do: list the learner's
        and the actors' Jobs by name. Only the pods that watch mount its token (`pod_template`)."""
        name, jobs = self.names["watch"], job_names(self.spec.name, bool(self.spec.queue))
        account = {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": self.meta(name, "watch"),
            "automountServiceAccountToken": False,
        }
        role = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": self.meta(name, "watch"),
            # A list restricted to names: the watch lists with a metadata.name field selector.
            "rules": [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list"],
                       "resourceNames": [jobs["learner"], jobs["actor"]]}],
        }  # fmt: skip
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": self.meta(name, "watch"),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": self.spec.namespace}],
        }
        return [account, role, binding]

    def network_policy(self) -> dict[str, Any]:
        name = self.spec.name
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": self.meta(self.names["learner"], "learner"),
            "spec": {
                "podSelector": {"matchLabels": selector(name, "learner")},
                "policyTypes": ["Ingress"],
                # Only this experiment's pods, in this namespace, reach the learner's ports (a
                # port per rank; the ranks' own collectives stay inside the pod, on its loopback).
                "ingress": [
                    {
                        "from": [{"podSelector": {"matchLabels": {"surreal.io/experiment": name}}}],
                        "ports": [{"protocol": "TCP", "port": port} for port in self.learner_ports],
                    },
                    # Learner pods among themselves (--learner-pods): the control store and
                    # gloo's connections, on ports gloo picks.
                    *(
                        [{"from": [{"podSelector": {"matchLabels": selector(name, "learner")}}]}]
                        if self.spec.learner_pods > 1
                        else []
                    ),
                ],
            },
        }

    @property
    def learner_ports(self) -> tuple[int, ...]:
        """The port of each learner rank of one learner pod, from the program's learner address."""
        ports = learner_ports(kube_target(self.spec).learner_addr)
        return ports[: len(ports) // self.spec.learner_pods]

    def ranks_service(self) -> dict[str, Any]:
        """The headless Service named as the learner pods' `subdomain`: each resolves as
        `<job>-<index>.NAME-ranks`, also before it is ready (the pods meet in pod 0's control store
        before any rank serves)."""
        ports = {**pods.rank_ports(self.learner_ports), "control": RANKS_CONTROL_PORT}
        return self.headless_service("learner", self.names["ranks"], ports)

    def replay_service(self) -> dict[str, Any]:
        """The headless Service named as the replay shards' `subdomain`: shard i resolves as
        `<job>-<i>.NAME-replay` (replay_hosts), each actor inserting into its own shard."""
        return self.headless_service(REPLAY_ROLE, self.names[REPLAY_ROLE], {"grpc": REPLAY_PORT})

    def headless_service(self, role: str, name: str, ports: Mapping[str, int]) -> dict[str, Any]:
        """A Service that gives each pod of `role` its own DNS name, also before it is ready."""
        service = self.service(role, ports)
        service["metadata"]["name"] = name
        service["spec"] = {"clusterIP": "None", "publishNotReadyAddresses": True, **service["spec"]}
        del service["spec"]["type"]
        return service

    def replay_network_policy(self) -> dict[str, Any]:
        """Only this experiment's pods reach the replay shards' port."""
        name = self.spec.name
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": self.meta(self.names[REPLAY_ROLE], REPLAY_ROLE),
            "spec": {
                "podSelector": {"matchLabels": selector(name, REPLAY_ROLE)},
                "policyTypes": ["Ingress"],
                "ingress": [{
                    "from": [{"podSelector": {"matchLabels": {"surreal.io/experiment": name}}}],
                    "ports": [{"protocol": "TCP", "port": REPLAY_PORT}],
                }],
            },
        }  # fmt: skip

    def service(self, role: str, ports: Mapping[str, int]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": self.meta(self.names[role], role),
            "spec": {
                "type": "ClusterIP",
                "selector": selector(self.spec.name, role),
                "ports": [
                    {"name": name, "port": port, "targetPort": name, "protocol": "TCP"}
                    for name, port in ports.items()
                ],  # fmt: skip
            },
        }

    def placement_of(self, role: str) -> Placement:
        return self.placement.get(role, Placement())

    def resources(self, component: Component) -> dict[str, dict[str, str]]:
        role = component.role
        base = self.settings.resources.get(role) or pods.default_resources(component)
        return pods.with_gpu(base, self.placement_of(role).gpu or (self.spec.gpu if role == "learner" else 0))

    def pod_template(self, component: Component, peer: bool = False) -> dict[str, Any]:
        container = pods.component_container(
            component, self.spec.image, self.settings.image_pull_policy, self.resources(component),
            ports=self.learner_ports if component.role == "learner" else (),
        )  # fmt: skip
        if component.role == "learner" and self.spec.learner_pods > 1:
            container["ports"].append(
                {"name": "control", "containerPort": RANKS_CONTROL_PORT, "protocol": "TCP"}
            )
        data: dict[str, Any] = {"emptyDir": {}}  # workers and learner peers keep nothing in theirs
        shares_claim = self.settings.storage == "pvc" and (
            (component.role == "learner" and not peer) or component.role == REPLAY_ROLE
        )
        if shares_claim:
            data = {"persistentVolumeClaim": {"claimName": self.names["claim"]}}
        placement, affinity = self.placement_of(component.role), None
        if component.role == REPLAY_ROLE and shares_claim:
            # A shard saves its rows on SIGTERM to the experiment's volume, for its replacement:
            # the learner's claim, ReadWriteOnce, so on the learner's node (as TensorBoard).
            placement, affinity = self.beside_learner()
        spec = pods.pod_spec([container], pods.component_volumes(self.names, data), placement, affinity)
        # A Job's pod is never restarted in place: a crash is a failed pod that the Job replaces
        # (or not: podFailurePolicy, which needs Never), and a pod that exits 0 is done.
        spec["restartPolicy"] = "Never"
        # It watches the experiment's Jobs (watch.py): the token of the experiment's own account.
        spec["serviceAccountName"] = self.names["watch"]
        spec["automountServiceAccountToken"] = True
        if component.role == "learner":
            spec["terminationGracePeriodSeconds"] = LEARNER_GRACE_SECONDS
            if self.spec.learner_pods > 1:  # <job>-<index>.NAME-ranks: ranks_service
                spec["subdomain"] = self.names["ranks"]
        if component.role == REPLAY_ROLE:  # <job>-<index>.NAME-replay: replay_service
            spec["subdomain"] = self.names[REPLAY_ROLE]
        return {"metadata": {"labels": labels(self.spec.name, component.role)}, "spec": spec}

    def job(self, component: Component, pods_wanted: int, part: str = "") -> dict[str, Any]:
        """The Job of one role (`part`: of a role's second Job, the learner's peers): `pods_wanted`
        indexed pods that each run to completion."""
        role = component.role
        spec: dict[str, Any] = {
            "completionMode": "Indexed",
            "completions": pods_wanted,
            "parallelism": pods_wanted,
            **job_failure_policy(role, policy_of(role)),
        }
        meta = self.meta(self.names[part or role], role)
        spec["template"] = self.pod_template(component, peer=bool(part))
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}

    def jobset(self, jobs: list[dict[str, Any]]) -> dict[str, Any]:
        """A queued experiment's Jobs as one JobSet, the one object that carries the queue label:
        Kueue admits it as one Workload, all or nothing, and unsuspends it. Each Job keeps its
        failure policy (`jobset_failure_policy`); it succeeds when the learner's Job does (the
        workers then exit 0 by themselves: watch.py)."""
        meta = self.meta(self.spec.name, "experiment")
        meta["labels"][QUEUE_LABEL] = str(self.spec.queue)
        replicated = [
            {"name": job["metadata"]["name"][len(self.spec.name) + 1 :], "replicas": 1,
             "template": {"metadata": {"labels": job["metadata"]["labels"]}, "spec": job["spec"]}}
            for job in jobs
        ]  # fmt: skip
        return {
            "apiVersion": JOBSET_API,
            "kind": "JobSet",
            "metadata": meta,
            "spec": {
                "suspend": True,  # Kueue unsuspends it once admitted
                # The workers reach the learner through its Service; no per-pod DNS names needed.
                "network": {"enableDNSHostnames": False},
                "successPolicy": {"operator": "All", "targetReplicatedJobs": ["learner"]},
                "failurePolicy": jobset_failure_policy([r["name"] for r in replicated]),
                "replicatedJobs": replicated,
            },
        }

    def claim(self) -> dict[str, Any]:
        claim: dict[str, Any] = {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": self.settings.storage_size}},
        }
        if self.settings.storage_class:
            claim["storageClassName"] = self.settings.storage_class
        return {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": self.meta(self.names["claim"], "learner"),
            "spec": claim,
        }

    def disruption_budget(self) -> dict[str, Any]:
        """No voluntary eviction (a drain, a scale-down) of a ready learner: it would cost the update
        in flight and a restart. One not ready may be evicted, so it never blocks a drain for nothing."""
        return {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": self.meta(self.names["learner"], "learner"),
            "spec": {
                "minAvailable": self.spec.learner_pods,  # every learner pod: each is a part of the group
                "selector": {"matchLabels": selector(self.spec.name, "learner")},
                "unhealthyPodEvictionPolicy": "AlwaysAllow",
            },
        }

    def beside_learner(self) -> tuple[Placement, dict[str, Any]]:
        """The placement and affinity of a pod that mounts the learner's claim: ReadWriteOnce means
        one node, not one pod, so it runs on the learner's node (which may be a tainted GPU node:
        it tolerates what the learner tolerates)."""
        learner = self.placement_of("learner")
        same_node = {
            "labelSelector": {"matchLabels": selector(self.spec.name, "learner")},
            "topologyKey": "kubernetes.io/hostname",
        }
        affinity = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [same_node]}}
        return Placement(learner.node_selector, learner.tolerations), affinity

    def tensorboard(self) -> dict[str, Any]:
        resources = self.settings.resources.get("tensorboard") or {
            "requests": dict(TENSORBOARD_RESOURCES),
            "limits": dict(TENSORBOARD_RESOURCES),
        }
        container = pods.tensorboard_container(self.spec.image, self.settings.image_pull_policy, resources)
        volumes = [
            {"name": "tmp", "emptyDir": {}},
            # The learner's claim, read-only, on the learner's node (beside_learner).
            {"name": "data", "persistentVolumeClaim": {"claimName": self.names["claim"], "readOnly": True}},
        ]
        placement, affinity = self.beside_learner()
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": self.meta(self.names["tensorboard"], "tensorboard"),
            "spec": {
                # A queued experiment holds no pod while it waits or is suspended: its TensorBoard
                # starts when asked (`surreal tensorboard` says how).
                "replicas": 0 if self.spec.queue else 1,
                "selector": {"matchLabels": selector(self.spec.name, "tensorboard")},
                "template": {
                    "metadata": {"labels": labels(self.spec.name, "tensorboard")},
                    "spec": pods.pod_spec([container], volumes, placement, affinity),
                },
            },
        }

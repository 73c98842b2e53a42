"""Strict offline validation of a JobSet (jobset.x-k8s.io/v1alpha2), which kubernetes-validate
has no schema for (it knows the core API only).

The JobSet's own fields are checked against a schema written here from the v1alpha2 API types of
JobSet 0.8 (JobSetSpec, ReplicatedJob, Network, SuccessPolicy, FailurePolicy and its rules,
StartupPolicy), strict as kubernetes-validate is: an unknown field anywhere is an error, enums and
required fields are enforced. The parts that are core API objects are handed to kubernetes-validate
for the cluster version asked: the metadata as a ConfigMap's, and each replicated Job's template as
a batch/v1 Job, so a template field a version lacks (backoffLimitPerIndex before 1.29, say) fails
there. Also checked, as JobSet's webhook does: replicated Job names are unique DNS-1035 labels,
success and failure rules name existing replicated Jobs, and every Job name the controller will
derive (`<jobset>-<replicatedJob>-<index>`) is a DNS-1123 label of at most 63 characters.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import jsonschema
import kubernetes_validate

API_VERSION = "jobset.x-k8s.io/v1alpha2"
_NAME = {"type": "string", "pattern": r"^[a-z]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63}
_NAMES = {"type": "array", "items": {"type": "string"}}


def _strict(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required),
            "additionalProperties": False}  # fmt: skip


_RULE = _strict(
    {
        "name": _NAME,
        "action": {"enum": ["FailJobSet", "RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts"]},
        "onJobFailureReasons": _NAMES,
        "onJobFailureMessagePatterns": _NAMES,
        "targetReplicatedJobs": _NAMES,
    },
    ("name", "action"),
)
_SPEC = _strict(
    {
        "replicatedJobs": {
            "type": "array",
            "minItems": 1,
            "items": _strict(
                {
                    "name": _NAME,
                    "groupName": {"type": "string"},
                    "template": {"type": "object"},  # a JobTemplateSpec: kubernetes-validate
                    "replicas": {"type": "integer", "minimum": 0},
                    "dependsOn": {"type": "array", "items": _strict(
                        {"name": _NAME, "status": {"enum": ["Ready", "Complete"]}}, ("name", "status"))},
                },
                ("name", "template"),
            ),
        },
        "network": _strict({
            "enableDNSHostnames": {"type": "boolean"},
            "subdomain": _NAME,
            "publishNotReadyAddresses": {"type": "boolean"},
        }),
        "successPolicy": _strict(
            {"operator": {"enum": ["All", "Any"]}, "targetReplicatedJobs": _NAMES}, ("operator",)
        ),
        "failurePolicy": _strict({
            "maxRestarts": {"type": "integer", "minimum": 0},
            "restartStrategy": {"enum": ["Recreate", "BlockingRecreate"]},
            "rules": {"type": "array", "items": _RULE},
        }),
        "startupPolicy": _strict({"startupPolicyOrder": {"enum": ["AnyOrder", "InOrder"]}},
                                 ("startupPolicyOrder",)),
        "suspend": {"type": "boolean"},
        "coordinator": _strict({"replicatedJob": _NAME, "jobIndex": {"type": "integer"},
                                "podIndex": {"type": "integer"}}, ("replicatedJob",)),
        "managedBy": {"type": "string"},
        "ttlSecondsAfterFinished": {"type": "integer", "minimum": 0},
    },
    ("replicatedJobs",),
)  # fmt: skip
SCHEMA = _strict(
    {"apiVersion": {"const": API_VERSION}, "kind": {"const": "JobSet"}, "metadata": {"type": "object"},
     "spec": _SPEC},
    ("apiVersion", "kind", "metadata", "spec"),
)  # fmt: skip
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class JobSetInvalid(ValueError):
    pass


def validate_jobset(obj: dict[str, Any], version: str) -> None:
    """Raise JobSetInvalid or kubernetes_validate.ValidationError if `obj` is not a valid JobSet
    for a cluster of `version`."""
    try:
        jsonschema.validate(obj, SCHEMA)
    except jsonschema.ValidationError as exc:
        raise JobSetInvalid(f"JobSet {'.'.join(map(str, exc.absolute_path))}: {exc.message}") from None
    meta = obj["metadata"]
    kubernetes_validate.validate({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}, version,
                                 strict=True)  # fmt: skip
    spec = obj["spec"]
    names = [r["name"] for r in spec["replicatedJobs"]]
    if len(set(names)) != len(names):
        raise JobSetInvalid(f"JobSet replicatedJobs: names repeat: {names}")
    targets = list((spec.get("successPolicy") or {}).get("targetReplicatedJobs") or [])
    for rule in (spec.get("failurePolicy") or {}).get("rules") or []:
        targets += rule.get("targetReplicatedJobs") or []
    unknown = sorted(set(targets) - set(names))
    if unknown:
        raise JobSetInvalid(f"JobSet policies name replicated Jobs it does not have: {unknown}")
    for rjob in spec["replicatedJobs"]:
        for index in range(rjob.get("replicas", 1)):
            job_name = f"{meta['name']}-{rjob['name']}-{index}"
            if len(job_name) > 63 or not _LABEL.fullmatch(job_name):
                raise JobSetInvalid(f"JobSet: its Job {job_name!r} would not be a DNS-1123 label")
        template = copy.deepcopy(rjob["template"])
        if "suspend" in template.get("spec", {}):
            raise JobSetInvalid(f"JobSet {rjob['name']}: a replicated Job's suspend is the JobSet's")
        job = {"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": job_name, "namespace": meta.get("namespace", "default"),
                            **template.get("metadata", {})},
               "spec": template.get("spec", {})}  # fmt: skip
        kubernetes_validate.validate(job, version, strict=True)


def validate(obj: dict[str, Any], version: str) -> None:
    """Any object the renderer or the chart makes, strictly, for a cluster of `version`."""
    if obj.get("apiVersion") == API_VERSION:
        validate_jobset(obj, version)
    else:
        kubernetes_validate.validate(obj, version, strict=True)

"""An in-memory Kubernetes API server behind the official client's REST layer.

`fake_client()` returns a real `kubernetes.client.ApiClient` whose `rest_client` is a `FakeApi`:
the generated API classes serialize and deserialize for real, and the fake stores objects, answers
404/409, lists by label, cascades deletes through ownerReferences (like the garbage collector),
takes merge patches (a Job's parallelism, the root's annotations), serves pod logs, and records
every request as (verb, resource) pairs for the
RBAC test. Failures are injected per (verb, resource); custom resources (JobSets, Kueue's
Workloads) are served like any other, unless their resource is in `unserved` (no such CRD: 404).
`after` hooks play a cluster's controllers: each is called with every request once it was served.
"""

from __future__ import annotations

import base64
import copy
import itertools
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlparse

import urllib3
from kubernetes import client

_VERBS = {"POST": "create", "DELETE": "delete", "PATCH": "patch", "PUT": "update"}


class Response:
    def __init__(self, status: int, body: Any, reason: str = "") -> None:
        self.status = status
        self.reason = reason or {200: "OK", 201: "Created", 404: "Not Found"}.get(status, "Error")
        self.data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.headers = {"content-type": "application/json"}

    def read(self) -> bytes:
        return self.data

    def getheaders(self) -> dict[str, str]:
        return self.headers

    def getheader(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name, default)

    # what a raw (_preload_content=False) urllib3 response offers
    @property
    def response(self) -> Response:
        return self

    def stream(self, amt: int) -> Any:
        for i in range(0, len(self.data), amt):
            yield self.data[i : i + amt]

    def release_conn(self) -> None:
        pass


@dataclass
class Request:
    method: str
    verb: str  # RBAC verb: get, list, create, patch, delete
    resource: str  # RBAC resource: "configmaps", "deployments.apps/scale", "pods/log"
    namespace: str | None
    name: str | None
    query: dict[str, str]
    body: Any


@dataclass
class FakeApi:
    namespaces: set[str] = field(default_factory=lambda: {"default"})
    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    logs: dict[tuple[str, str], str] = field(default_factory=dict)  # (pod, container) -> text
    fail: dict[tuple[str, str], int] = field(default_factory=dict)  # (verb, resource) -> status
    unreachable: bool = False
    unserved: set[str] = field(default_factory=set)  # resources without a CRD, e.g. "jobsets.jobset.x-k8s.io"
    after: list[Any] = field(default_factory=list)  # callables taking each served Request
    requests: list[Request] = field(default_factory=list)
    _uids: Any = field(default_factory=lambda: itertools.count(1))

    # --- helpers for tests -----------------------------------------------------------------

    def add(self, resource: str, obj: dict[str, Any]) -> None:
        obj = copy.deepcopy(obj)
        meta = obj["metadata"]
        meta.setdefault("uid", f"uid-{next(self._uids)}")
        self.objects[(resource, meta["namespace"], meta["name"])] = obj

    def names(self, resource: str) -> list[str]:
        return sorted(name for (res, _, name) in self.objects if res == resource)

    def sent(self, verb: str) -> list[Request]:
        return [r for r in self.requests if r.verb == verb]

    # --- the REST client interface ---------------------------------------------------------

    def request(self, method: str, url: str, headers: Any = None, body: Any = None,
                post_params: Any = None, _request_timeout: Any = None) -> Response:  # fmt: skip
        if self.unreachable:
            raise urllib3.exceptions.MaxRetryError(None, url, OSError("[Errno 111] Connection refused"))
        parsed = urlparse(url)
        query = {k: v[0] for k, v in parse_qs(parsed.query).items()}
        ns, resource, name, sub = _parse(parsed.path)
        verb = _VERBS.get(method) or ("get" if name else "list")
        rbac = resource + (f"/{sub}" if sub else "")
        body = json.loads(body) if isinstance(body, str) else body
        self.requests.append(Request(method, verb, rbac, ns, name, query, body))
        if (verb, rbac) in self.fail:
            return Response(self.fail[(verb, rbac)], {"kind": "Status", "message": "injected"})
        if resource in self.unserved:
            return Response(
                404, {"kind": "Status", "message": "the server could not find the requested resource"}
            )
        response = self._serve(verb, resource, sub, ns, name, query, body)
        for hook in self.after:
            hook(self.requests[-1])
        return response

    def close(self) -> None:
        pass

    def _serve(self, verb: str, resource: str, sub: str | None, ns: str | None, name: str | None,
               query: dict[str, str], body: Any) -> Response:  # fmt: skip
        if resource == "namespaces":
            return _ok({"metadata": {"name": name}}) if name in self.namespaces else _missing()
        key = (resource, ns or "", name or "")
        if verb == "create":
            return self._create(resource, ns or "", body)
        if verb == "list":
            return _ok({"metadata": {}, "items": self._select(resource, ns, query)})
        if key not in self.objects:
            return _missing()
        if sub == "log":
            return Response(200, self.logs.get((name or "", query.get("container", "")), "").encode())
        if verb == "get":
            return _ok(self.objects[key])
        if verb == "delete":
            self._cascade(key)
            return _ok({"kind": "Status", "apiVersion": "v1", "status": "Success"})
        if verb == "patch" and sub is None and set(body) <= {"metadata", "spec", "data"}:  # a merge patch
            _merge(self.objects[key], body)
            return _ok(self.objects[key])
        return Response(405, {"kind": "Status", "message": f"fake: {verb} {resource}/{sub}"})

    def _create(self, resource: str, ns: str, body: dict[str, Any]) -> Response:
        if ns not in self.namespaces:
            return Response(404, {"kind": "Status", "message": f'namespaces "{ns}" not found'})
        key = (resource, ns, body["metadata"]["name"])
        if key in self.objects:
            return Response(409, {"kind": "Status", "reason": "AlreadyExists"})
        body = copy.deepcopy(body)
        if resource == "secrets" and "stringData" in body:  # as the API server stores it
            data = body.setdefault("data", {})
            for k, v in body.pop("stringData").items():
                data[k] = base64.b64encode(v.encode()).decode()
        self.add(resource, body)
        return Response(201, self.objects[key])

    def _select(self, resource: str, ns: str | None, query: dict[str, str]) -> list[dict]:
        wanted = dict(p.split("=", 1) for p in query.get("labelSelector", "").split(",") if p)
        return [
            obj
            for (res, obj_ns, _), obj in sorted(self.objects.items())
            if res == resource and obj_ns == ns
            and all(obj["metadata"].get("labels", {}).get(k) == v for k, v in wanted.items())
        ]  # fmt: skip

    def _cascade(self, key: tuple[str, str, str]) -> None:
        uid = self.objects.pop(key)["metadata"]["uid"]
        for other, obj in list(self.objects.items()):
            refs = obj["metadata"].get("ownerReferences") or []
            if other in self.objects and any(r["uid"] == uid for r in refs):
                self._cascade(other)


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """RFC 7386, as the API server applies a merge patch (None deletes a key)."""
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, dict) and isinstance(target.get(k), dict):
            _merge(target[k], v)
        else:
            target[k] = copy.deepcopy(v)


def _ok(body: Any) -> Response:
    return Response(200, body)


def _missing() -> Response:
    return Response(404, {"kind": "Status", "reason": "NotFound"})


def _parse(path: str) -> tuple[str | None, str, str | None, str | None]:
    """(namespace, RBAC resource like "deployments.apps", name, subresource)."""
    parts = path.strip("/").split("/")
    group = "" if parts[0] == "api" else parts[1]
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if rest[0] == "namespaces" and len(rest) <= 2:
        return None, "namespaces", (rest[1] if len(rest) == 2 else None), None
    ns, resource, *tail = rest[1:] if rest[0] == "namespaces" else [None, *rest]
    name = tail[0] if tail else None
    sub = tail[1] if len(tail) > 1 else None
    return ns, resource + (f".{group}" if group else ""), name, sub


def fake_client(api: FakeApi, host: str = "https://127.0.0.1:6443") -> client.ApiClient:
    configuration = client.Configuration(host=host)
    api_client = client.ApiClient(configuration)
    api_client.rest_client = api  # type: ignore[assignment]
    return api_client

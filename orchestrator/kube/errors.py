"""Typed errors of the kube launcher, each with one line that names the problem and the way out.

Every Kubernetes API call goes through `call`, which turns transport failures and refusals into
these errors, so no caller handles `ApiException` status codes for the common cases.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import urllib3
from kubernetes.client.exceptions import ApiException

from surreal.orchestrator.launcher import LauncherError

T = TypeVar("T")


class KubeError(LauncherError):
    """A cluster operation that cannot be done; str(error) is the one line to show."""


class ClusterUnreachable(KubeError):
    """No cluster configured, or its API server does not answer or rejects our credentials."""


class Forbidden(KubeError):
    """RBAC refused one verb on one resource."""

    def __init__(self, verb: str, resource: str, namespace: str | None) -> None:
        where = f" in namespace {namespace!r}" if namespace else ""
        super().__init__(
            f"forbidden: your Kubernetes user may not {verb} {resource}{where} "
            "(RBAC; manifests/rbac.yaml has the Role surreal needs)"
        )


class NamespaceMissing(KubeError):
    def __init__(self, namespace: str) -> None:
        super().__init__(
            f"namespace {namespace!r} does not exist (create it: kubectl create namespace {namespace})"
        )


class ExperimentExists(KubeError):
    pass


class ExperimentNotFound(KubeError):
    pass


class ImageNotSet(KubeError):
    pass


def call(
    fn: Callable[..., T],
    *args: Any,
    verb: str,
    resource: str,
    namespace: str | None,
    server: str = "the Kubernetes API",
    **kwargs: Any,
) -> T:
    """Call one API method; 403 -> Forbidden, 401 and transport errors -> ClusterUnreachable.

    Other API errors (404, 409, ...) are re-raised for the caller, who knows what they mean there.
    """
    try:
        return fn(*args, **kwargs)
    except ApiException as exc:
        if exc.status == 403:
            raise Forbidden(verb, resource, namespace) from None
        if exc.status == 401:
            raise ClusterUnreachable(
                f"{server} rejected the credentials of your kubeconfig (401 Unauthorized)"
            ) from None
        raise
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise ClusterUnreachable(f"cannot reach {server}: {_reason(exc)}") from None


def stream_error(exc: BaseException, subresource: str, pod: str, namespace: str, what: str) -> KubeError:
    """The typed error for a websocket call (exec, port-forward) into `pod` that failed to open: the
    client wraps every such failure in ApiException(0), with the HTTP status only in its reason."""
    reason = str(getattr(exc, "reason", exc))
    if "403" in reason:
        return Forbidden("create", subresource, namespace)
    if "404" in reason:
        return KubeError(f"pod {pod!r} is gone; try again")
    return ClusterUnreachable(f"{what} pod {pod!r} failed: {reason}")


def _reason(exc: BaseException) -> str:
    # MaxRetryError wraps the interesting error (connection refused, name resolution, timeout).
    inner = getattr(exc, "reason", None) or exc
    text = str(inner)
    # urllib3 prefixes "<urllib3.connection.HTTPSConnection object at 0x...>: "; drop it.
    return text.split(">: ", 1)[-1] if ">: " in text else text

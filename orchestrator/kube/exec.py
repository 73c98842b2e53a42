"""A command run in a pod's container, like `kubectl exec`, with the official client.

`surreal plot` copies a Kubernetes experiment's event files out of its learner this way, as
`kubectl cp` does (`tar cf -` in the container, the archive on stdout). The launcher takes any
`Exec`, so tests replace the API server's websocket with a function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import yaml

from surreal.orchestrator.kube.errors import KubeError, stream_error

# (pod, namespace, container, argv) -> the command's stdout; a failure is a KubeError.
Exec = Callable[[str, str, str, Sequence[str]], bytes]
STDOUT, STDERR, STATUS = 1, 2, 3  # the exec websocket's channels
# Seconds the whole command may take: an archive of event files is megabytes at most.
EXEC_TIMEOUT = 120.0


def pod_exec(core_api: Any, timeout: float = EXEC_TIMEOUT) -> Exec:
    """Commands run through the API server (pods/exec); stdout is kept as bytes."""

    def run(pod: str, namespace: str, container: str, argv: Sequence[str]) -> bytes:
        from kubernetes.stream import stream

        try:
            ws = stream(core_api.connect_get_namespaced_pod_exec, pod, namespace, container=container,
                        command=list(argv), stdin=False, stdout=True, stderr=True, tty=False,
                        binary=True, _preload_content=False)  # fmt: skip
        except Exception as exc:  # the client wraps every websocket failure in ApiException(0)
            raise stream_error(exc, "pods/exec", pod, namespace, "exec in") from None
        try:
            ws.run_forever(timeout=timeout)
            if ws.is_open():
                raise KubeError(f"`{argv[0]}` in pod {pod!r} did not finish in {timeout:g} s")
            out, err, status = ws.read_channel(STDOUT), ws.read_channel(STDERR), ws.read_channel(STATUS)
        finally:
            ws.close()
        check_status(status, err, argv, pod)
        return bytes(out)

    return run


def check_status(status: bytes, stderr: bytes, argv: Sequence[str], pod: str) -> None:
    """Raise unless the exec's status channel says Success (a v1 Status object, as JSON)."""
    answer = yaml.safe_load(status or b"{}") or {}
    if answer.get("status") == "Success":
        return
    last = (stderr.decode(errors="replace").strip().splitlines() or [""])[-1]
    why = last or answer.get("message") or "no exit status"
    raise KubeError(f"`{' '.join(argv)}` in pod {pod!r} failed: {why}")

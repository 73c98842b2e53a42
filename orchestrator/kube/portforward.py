"""A local TCP port relayed to a pod's port, like `kubectl port-forward`, with the official client.

The client's port-forward gives one socket per websocket; gRPC (`surreal status`) and a browser
(`surreal tensorboard`) need a real TCP address and open several connections. So `PortForward`
listens on 127.0.0.1 and relays each accepted connection through a fresh `dial()`.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger(__name__)


class StreamSocket(Protocol):
    def recv(self, size: int) -> bytes: ...
    def sendall(self, data: bytes) -> Any: ...
    def shutdown(self, how: int) -> None: ...
    def close(self) -> None: ...


Dial = Callable[[], StreamSocket]


def pod_dialer(core_api: Any, pod: str, namespace: str, port: int) -> Dial:
    """Connections to `port` of `pod` through the API server (pods/portforward)."""
    from kubernetes.stream import portforward

    from surreal.orchestrator.kube.errors import stream_error

    def dial() -> StreamSocket:
        try:
            forward = portforward(
                core_api.connect_get_namespaced_pod_portforward, pod, namespace, ports=str(port)
            )
        except Exception as exc:  # the client wraps every websocket failure in ApiException(0)
            raise stream_error(exc, "pods/portforward", pod, namespace, "port-forward to") from None
        sock = forward.socket(port)
        sock.setblocking(True)
        return sock  # type: ignore[no-any-return]

    return dial


class PortForward:
    """Listen on `host:local_port` (0 = any free port) and relay connections through `dial`."""

    def __init__(self, dial: Dial, local_port: int = 0, host: str = "127.0.0.1") -> None:
        self._dial = dial
        self._listener = socket.create_server((host, local_port))
        self.host = host
        self.port: int = self._listener.getsockname()[1]
        self.errors: list[str] = []  # dial failures, newest last (a relay has no caller to raise to)
        self._open: set[Any] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        threading.Thread(target=self._accept, name=f"port-forward :{self.port}", daemon=True).start()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def __enter__(self) -> PortForward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wait(self) -> None:
        """Block until closed (or Ctrl-C): `surreal tensorboard` serves until interrupted."""
        self._closed.wait()

    def close(self) -> None:
        self._closed.set()
        _close(self._listener)
        with self._lock:
            socks, self._open = list(self._open), set()
        for sock in socks:
            _close(sock)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # listener closed
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        try:
            remote = self._dial()
        except Exception as exc:
            self.errors.append(str(exc))
            log.warning("port-forward: %s", exc)
            _close(client)
            return
        with self._lock:
            if self._closed.is_set():
                _close(client)
                _close(remote)
                return
            self._open.update((client, remote))
        threading.Thread(target=_pump, args=(remote, client), daemon=True).start()
        _pump(client, remote)


def _pump(src: Any, dst: Any) -> None:
    """Copy src -> dst until either side ends, then end both (which stops the other pump)."""
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        _close(src)
        _close(dst)


def _close(sock: Any) -> None:
    # shutdown wakes a thread blocked in recv on the same socket; close alone may not.
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()

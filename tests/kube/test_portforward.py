"""The local relay behind `surreal status` and `surreal tensorboard`."""

from __future__ import annotations

import socket
import threading

from surreal.orchestrator.kube.portforward import PortForward


def echo_server() -> tuple[socket.socket, int]:
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=lambda c=conn: [c.sendall(d) for d in iter(lambda: c.recv(4096), b"")],
                             daemon=True).start()  # fmt: skip

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


def test_every_connection_is_relayed_through_its_own_dial() -> None:
    server, port = echo_server()
    dials = []

    def dial() -> socket.socket:
        dials.append(1)
        return socket.create_connection(("127.0.0.1", port))

    with server, PortForward(dial) as forward:
        for message in (b"hello", b"x" * 200_000):
            with socket.create_connection(("127.0.0.1", forward.port), timeout=5) as c:
                c.sendall(message)
                got = b""
                while len(got) < len(message):
                    got += c.recv(65536)
                assert got == message
    assert len(dials) == 2


def test_a_failed_dial_closes_the_connection_and_is_recorded() -> None:
    def dial() -> socket.socket:
        raise ConnectionRefusedError("pod is gone")

    with PortForward(dial) as forward:
        with socket.create_connection(("127.0.0.1", forward.port), timeout=5) as c:
            assert c.recv(10) == b""  # closed, not hanging
        assert forward.errors == ["pod is gone"]


def test_close_stops_listening() -> None:
    forward = PortForward(lambda: socket.socket())
    port = forward.port
    forward.close()
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        refused = False
    except OSError:
        refused = True
    assert refused

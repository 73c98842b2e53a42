"""Fixtures: real servers on 127.0.0.1 (port 0) and clients, all stopped at teardown."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest

from surreal.protocol import LearnerClient, LearnerServer, TensorSpec

TOKEN = "test-token"
SCHEMA = {"obs": TensorSpec("float32", (None, 4)), "act": TensorSpec("int64", (None,))}


def _fragment(n: int = 3, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.standard_normal((n, 4)).astype(np.float32),
        "act": rng.integers(0, 5, size=n).astype(np.int64),
    }


@pytest.fixture
def make_fragment() -> Callable[..., dict[str, np.ndarray]]:
    """make_fragment(n=3, seed=0): tensors matching SCHEMA with n steps."""
    return _fragment


@pytest.fixture
def token() -> str:
    """The token the servers of make_server check, and make_client sends by default."""
    return TOKEN


@pytest.fixture
def make_server() -> Iterator[Callable[..., tuple[LearnerServer, str]]]:
    servers: list[LearnerServer] = []

    def make(**kwargs: object) -> tuple[LearnerServer, str]:
        kwargs.setdefault("token", TOKEN)
        kwargs.setdefault("experience_schema", SCHEMA)
        server = LearnerServer(**kwargs)  # type: ignore[arg-type]
        servers.append(server)
        port = server.start()
        return server, f"127.0.0.1:{port}"

    yield make
    for server in servers:
        server.stop(grace=0)


@pytest.fixture
def make_client() -> Iterator[Callable[..., LearnerClient]]:
    clients: list[LearnerClient] = []

    def make(address: str, token: str = TOKEN, **kwargs: object) -> LearnerClient:
        client = LearnerClient(address, token, **kwargs)  # type: ignore[arg-type]
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()

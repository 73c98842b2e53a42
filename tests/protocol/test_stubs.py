"""The committed generated stubs are current and import under surreal.protocol.v1."""

from __future__ import annotations

import difflib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STUBS = ROOT / "protocol" / "v1"
GENERATED = ("surreal_pb2.py", "surreal_pb2.pyi")


def test_committed_stubs_match_a_fresh_generation(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "gen_protos.sh"), str(tmp_path)],
        env={**os.environ, "PYTHON": sys.executable},
        check=True,
        timeout=60,
    )
    for name in GENERATED:
        fresh = (tmp_path / name).read_text()
        committed = (STUBS / name).read_text()
        if fresh != committed:
            diff = "".join(
                difflib.unified_diff(
                    committed.splitlines(True), fresh.splitlines(True), "committed", "fresh", n=1
                )
            )
            pytest.fail(f"protocol/v1/{name} is stale; run scripts/gen_protos.sh\n{diff[:3000]}")


def test_stubs_import_as_surreal_protocol_v1() -> None:
    from surreal.protocol.v1 import surreal_pb2

    assert surreal_pb2.DESCRIPTOR.package == "surreal.v1"
    assert surreal_pb2.DESCRIPTOR.name == "surreal/v1/surreal.proto"
    assert surreal_pb2.Tensor.__module__ == "surreal.protocol.v1.surreal_pb2"
    services = surreal_pb2.DESCRIPTOR.services_by_name
    assert sorted(services) == ["Experience", "Parameters", "Replay", "Status"]
    stream = services["Experience"].methods_by_name["Stream"]
    assert stream.client_streaming and stream.server_streaming

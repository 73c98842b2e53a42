"""What the benchmarks share: a real learner component in its own process, its RSS over time."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

TOKEN = "bench-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def start_learner(tmp: Path, flags: dict[str, Any], overrides: dict[str, str] | None = None,
                  ) -> tuple[subprocess.Popen[bytes], str]:  # fmt: skip
    """`surreal component learner` for the spec of `flags` (as `surreal create` would build it),
    on free ports of 127.0.0.1 (one per learner rank: `flags["learners"]`), files in `tmp`; its
    address (the ranks', comma-separated)."""
    from surreal.spec import build_spec

    ports: list[int] = []
    while len(ports) < int(flags.get("learners", 1)):
        port = free_port()
        ports.append(port) if port not in ports else None
    addr = ",".join(f"127.0.0.1:{p}" for p in ports)
    spec = build_spec("bench", flags=flags, overrides=overrides)
    (tmp / "spec.yaml").write_text(spec.to_yaml())
    env = {**os.environ, "SURREAL_LEARNER_ADDR": addr, "SURREAL_TOKEN": TOKEN, "SURREAL_EXP_DIR": str(tmp)}
    argv = [sys.executable, "-m", "surreal", "component", "learner", "--spec", str(tmp / "spec.yaml")]
    log = (tmp / "learner.log").open("wb")
    return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT), addr


def rss_line(rss: list[tuple[float, int]]) -> str:
    """RSS at a quarter, half, three quarters and the end of the samples (time, bytes)."""
    marks = [rss[min(len(rss) - 1, round(q * (len(rss) - 1)))] for q in (0.25, 0.5, 0.75, 1.0)]
    return "  ".join(f"t={t:4.0f}s {b / 2**20:6.1f} MiB" for t, b in marks)

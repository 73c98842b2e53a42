"""Running algorithm roles in tests: in threads of the test process, or as separate processes.

`python roles.py ALGO ROLE CTX_JSON CFG_JSON` runs one role of any registered algorithm in this
process (the multi-process tests spawn it; the real entry point is `surreal component`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from surreal.algorithms.registry import get_algorithm
from surreal.runtime.run import RunContext

SCRIPT = Path(__file__)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_in_thread(target: Callable[..., int], *args: Any) -> tuple[threading.Thread, dict]:
    """Start target(*args) in a daemon thread; its return code lands in the dict under "rc"."""
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("rc", target(*args)), daemon=True)
    thread.start()
    return thread, result


def spawn(algo: str, role: str, ctx: RunContext, cfg: Any, log: Path) -> subprocess.Popen:
    """Run one role of `algo` as its own process, output appended to `log`."""
    ctx_json = json.dumps({**dataclasses.asdict(ctx), "exp_dir": str(ctx.exp_dir)})
    argv = [sys.executable, str(SCRIPT), algo, role, ctx_json, json.dumps(dataclasses.asdict(cfg))]
    env = {**os.environ, "PYTHONPATH": ""}
    return subprocess.Popen(argv, stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env)


def wait_for(predicate: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def read_status(path: Path) -> dict:
    """The learner's status.json, or {} while there is none (or it is being replaced)."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO)
    algo_name, role, ctx_json, cfg_json = argv
    algo = get_algorithm(algo_name)
    raw: dict[str, Any] = json.loads(ctx_json)
    ctx = RunContext(**{**raw, "exp_dir": Path(raw["exp_dir"])})
    fields = json.loads(cfg_json)
    config_type = type(algo.preset(ctx.env_id, ctx.num_agents))
    cfg = config_type(**{**fields, "hidden_sizes": tuple(fields["hidden_sizes"])})
    return algo.role_main(role)(cfg, ctx)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

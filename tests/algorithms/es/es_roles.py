"""Run one ES role in this process: `python es_roles.py ROLE CTX_JSON CFG_JSON` (for the
multi-process tests; the real entry point is `surreal component`)."""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
import sys
from pathlib import Path
from typing import Any

from surreal.algorithms.common.run import RunContext
from surreal.algorithms.es.actor import run_actor
from surreal.algorithms.es.config import ESConfig
from surreal.algorithms.es.evaluator import run_evaluator
from surreal.algorithms.es.learner import run_learner

ROLES = {"learner": run_learner, "actor": run_actor, "evaluator": run_evaluator}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ctx_to_json(ctx: RunContext) -> str:
    return json.dumps({**dataclasses.asdict(ctx), "exp_dir": str(ctx.exp_dir)})


def cfg_to_json(cfg: ESConfig) -> str:
    return json.dumps(dataclasses.asdict(cfg))


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO)
    role, ctx_json, cfg_json = argv
    raw: dict[str, Any] = json.loads(ctx_json)
    ctx = RunContext(**{**raw, "exp_dir": Path(raw["exp_dir"])})
    cfg_raw = json.loads(cfg_json)
    cfg = ESConfig(**{**cfg_raw, "hidden_sizes": tuple(cfg_raw["hidden_sizes"])})
    return ROLES[role](cfg, ctx)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

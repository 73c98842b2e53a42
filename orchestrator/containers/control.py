"""The controller of a detached containers run: `python -m surreal.orchestrator.containers.control
EXP_DIR` runs the experiment's Jobs (launcher.control) until the run ends, as the
foreground `surreal create` does in its own process; SIGTERM (`surreal delete`) stops it, and it
removes what it started."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import psutil

from surreal.orchestrator.containers.launcher import (
    PRIVATE,
    RECORD,
    ContainersLauncher,
    _interrupts,
    control,
    load_run,
    read_record,
)
from surreal.orchestrator.files import write_json_atomic
from surreal.orchestrator.launcher import LauncherError


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    exp_dir = Path(argv[0]).resolve()
    home = exp_dir.parent.parent  # $SURREAL_HOME/experiments/NAME
    try:
        record = read_record(exp_dir)
        record["controller_pid"] = os.getpid()  # this process writes the record from now on
        record["controller_started"] = psutil.Process().create_time()  # tells it from a reused pid
        write_json_atomic(exp_dir / RECORD, record, PRIVATE)
        run = load_run(exp_dir, record, ContainersLauncher(home)._engine_of(record))
        with _interrupts():
            phase = control(exp_dir, run, None)
    except LauncherError as exc:
        logging.error("%s", exc)
        return 1
    logging.info("experiment %s: %s", exp_dir.name, phase)
    return 0 if phase == "Succeeded" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

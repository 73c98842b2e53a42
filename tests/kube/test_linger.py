"""A finished run on Kubernetes: components idle instead of exiting (a pod that exits is restarted)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from kube_support import make_spec

from surreal.orchestrator import kube_render as kr
from surreal.orchestrator import kube_status as ks
from surreal.orchestrator.program import ENV_LINGER, Target, local_split, make_program
from surreal.spec import build_spec

TARGET = Target(spec_path="/s.yaml", learner_addr="x-learner:6000", bind_host="0.0.0.0", exp_dir="/e")


def test_kube_components_linger_and_local_ones_exit() -> None:
    kube = kr.kube_program(make_spec())
    assert all(c.env.get(ENV_LINGER) == "1" for c in kube.components)
    local = make_program(build_spec("e", flags={"algo": "ppo"}), TARGET, local_split(2))
    assert all(ENV_LINGER not in c.env for c in local.components)


def test_a_learner_reporting_done_is_succeeded_while_its_pod_still_runs() -> None:
    running = {"metadata": {"name": "x-learner-0", "labels": {"surreal.io/component": "learner"}},
               "status": {"phase": "Running", "containerStatuses": [
                   {"ready": True, "restartCount": 0, "state": {"running": {}}}]}}  # fmt: skip
    assert ks.phase([running], {"done": False}) == "Running"
    assert ks.phase([running], {"done": True}) == "Succeeded"


def test_linger_idles_until_sigterm() -> None:
    code = "from surreal.component import linger; linger('actor')"
    proc = subprocess.Popen([sys.executable, "-c", "import signal,sys; signal.signal(signal.SIGTERM, "
                             "lambda *_: sys.exit(143)); " + code], env=os.environ.copy())  # fmt: skip
    try:
        time.sleep(1.5)
        assert proc.poll() is None, "a lingering component must not exit by itself"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 143
    finally:
        proc.kill()

"""What the container tests drive a run with, beyond what the containers backend itself needs: a
run as a context manager that cleans up on Ctrl-C or SIGTERM, its pods by role, waits on a
condition, a crash or an OOM kill from the host, and `surreal status` of the run."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from surreal.orchestrator.containers.plan import RUN_LABEL, ContainersError, PodRun
from surreal.orchestrator.containers.run import Engine, Run, claim_dir
from surreal.orchestrator.home import poll_metrics
from surreal.orchestrator.kube import observe as kube_status


def ids(engine: Engine, run_id: str | None = None) -> list[str]:
    """The containers of run `run_id` (of every run when None)."""
    label = f"{RUN_LABEL}={run_id}" if run_id else RUN_LABEL
    return engine("ps", "-a", "-q", "--filter", f"label={label}").split()


class HarnessRun(Run):
    """A Run for tests: `with HarnessRun(plan, engine) as run:` starts it and removes everything it
    made at the end, also on SIGINT or SIGTERM."""

    def __enter__(self) -> Run:
        self._old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        for sig in self._old:
            signal.signal(sig, self._interrupted)
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        for sig, handler in self._old.items():
            signal.signal(sig, handler)

    def _interrupted(self, signum: int, _frame: object) -> None:
        self.close()
        raise KeyboardInterrupt(f"signal {signum}")

    def current(self, pod: PodRun) -> PodRun:
        """The newest pod of `pod`'s Job index (itself, unless it was replaced)."""
        return [p for p in self.started if p.workload == pod.workload and p.index == pod.index][-1]

    def pod(self, role: str) -> PodRun:
        return next(p for p in self.plan.pods if p.role == role)

    def pods_of(self, role: str) -> list[PodRun]:
        return [p for p in self.plan.pods if p.role == role]

    def exec(self, pod: PodRun, argv: Sequence[str]) -> str:
        return self.engine("exec", pod.name, *argv)

    def learner_status(self) -> dict[str, Any]:
        """What the learner writes into its claim about once a second (status.json)."""
        return poll_metrics(claim_dir(self.plan))

    def status(self, probe: bool = True) -> dict[str, Any]:
        """`surreal status NAME -o json` of this run, from the same code the kube backend uses."""
        return kube_status.status(self.plan.spec, self.pods(probe), self.learner_status(), jobs=self.jobs())

    def wait_for(self, what: str, predicate: Callable[[], bool], timeout: float, poll: float = 2.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.check_crash_loops()
            self.reconcile()
            if failure := self.job_failure():
                raise ContainersError(failure)
            if predicate():
                return
            if time.monotonic() > deadline:
                raise ContainersError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(poll)

    def kill(self, pod: PodRun, sig: int = signal.SIGKILL) -> int:
        """Signal the container's PID 1 from the host, as a crash or the OOM killer would."""
        info = self.engine.inspect([pod.name])
        pid = int(info[0]["State"]["Pid"]) if info else 0
        if pid <= 0:
            raise ContainersError(f"{pod.name} is not running")
        os.kill(pid, sig)
        return pid


@contextlib.contextmanager
def held_containers(engine: Engine, names: Sequence[str]) -> Iterator[list[str]]:
    """The containers' processes stopped (SIGSTOP to each one's PID 1, from the host) for the block,
    continued after it: held actors take no env step, so a run cannot end while a test injects its
    faults, however fast the machine. A signal sent meanwhile (a stop's SIGTERM) is delivered when
    they go on. Yields the names held."""
    pids = [int(info["State"]["Pid"]) for info in engine.inspect(list(names))] if names else []
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield list(names)
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

"""Runs a program's components as supervised local subprocesses.

Each component runs in its own process group, its output appended to `exp_dir/logs/<name>.log`,
and (on Linux) with PR_SET_PDEATHSIG=SIGKILL so that a supervisor killed with SIGKILL takes its
children with it. Everything it knows is in `exp_dir/state.json` (replaced atomically), which
`surreal status` and `surreal delete` read.

Every exit goes through the failure policy (policy.py), as on the other backends; a component with
restart=False fails on its first crash. SIGINT/SIGTERM/SIGHUP or `request_stop()` -> Stopped; a
second signal skips the grace period.

A new `exp_dir/program.json` (what `surreal scale` writes) is taken while running: components it no
longer has are retired (SIGTERM, SIGKILL after the grace period), new ones started, and changed ones
restarted once their old process is gone; the learner is never restarted this way.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import logging
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from surreal.orchestrator.files import write_json_atomic
from surreal.orchestrator.home import LOG_DIR, poll_metrics
from surreal.orchestrator.local.sched_slice import slice_ms_from_env, slice_request
from surreal.orchestrator.policy import (
    POLICIES,
    Action,
    Decision,
    RoleEnd,
    RolePolicy,
    decide,
    outcome,
    policy_of,
    unfinished,
)
from surreal.orchestrator.program import ACTOR_ROLE, ENV_TERMINATION_LOG, LEARNER_ROLE, Component, Program
from surreal.orchestrator.status import ENDED_STATES, ComponentState, Phase, describe_exit

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
PROGRAM_FILE = "program.json"
_PR_SET_PDEATHSIG = 1
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _child_preexec(
    cpu: int | None = None, request_slice: Callable[[], None] | None = None
) -> Callable[[], None] | None:
    """A preexec hook that makes the child die with the supervisor, given `cpu` pins it (and every
    thread it will start) to that CPU, and runs `request_slice` (sched_slice.py) (Linux only).

    The kernel sends the signal when the *thread* that forked the child exits, so components must
    be spawned from the thread that runs the supervisor loop (they are).
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # loaded before fork: no dlopen in the child
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the supervisor died before prctl took effect
            os._exit(1)
        if cpu is not None:
            try:
                os.sched_setaffinity(0, {cpu})
            except OSError:
                pass  # the CPU went away (hotplug, cgroup change): run unpinned
        if request_slice is not None:
            request_slice()

    return preexec


def actor_cpus(program: Program, pin: bool = True) -> dict[str, int]:
    """CPU per actor component: actor i on the i-th allowed CPU, round robin (Linux only); the
    learner and evaluator float. Pinned actors keep their envs' caches (unpinned, each step costs
    ~15% more CPU: docs/decisions.md). SURREAL_PIN_ACTORS=0 turns pinning off."""
    if not pin or not hasattr(os, "sched_getaffinity") or os.environ.get("SURREAL_PIN_ACTORS") == "0":
        return {}
    cpus = sorted(os.sched_getaffinity(0))
    actors = sorted((c for c in program.components if c.role == ACTOR_ROLE), key=lambda c: c.index)
    if len(cpus) < 2:
        return {}
    return {c.name: cpus[i % len(cpus)] for i, c in enumerate(actors)}


@dataclass
class _Child:
    """What the supervisor knows about one component (mutable, supervisor thread only)."""

    component: Component
    state: ComponentState = ComponentState.PENDING
    restarts: int = 0  # every restart, disruptions included
    failures: int = 0  # exits that counted against its role's retries (policy.py)
    proc: subprocess.Popen[bytes] | None = None
    pid: int | None = None
    pid_create_time: float | None = None
    exit_code: int | None = None
    restart_at: float = 0.0  # time.monotonic() at which a Restarting child is started again
    replaces: _Child | None = None  # the retiring process of the same name this one waits for
    retire_by: float = 0.0  # time.monotonic() after which a retiring child is SIGKILLed

    def to_dict(self) -> dict[str, Any]:
        """Its state.json entry; a negative exit_code: killed by that signal."""
        mine = ("state", "restarts", "failures", "pid", "pid_create_time", "exit_code")
        c = self.component
        return {"name": c.name, "role": c.role, "index": c.index, **{k: getattr(self, k) for k in mine}}


class Supervisor:
    """Starts, watches, restarts and stops the components of one program: `run()` (once) blocks
    until the experiment ends and returns its phase, calling `on_tick` about every `tick_seconds`.
    `request_stop()` may be called from any thread; signal handlers are installed only when `run()`
    is called from the main thread."""

    def __init__(
        self,
        program: Program,
        exp_dir: Path | str,
        *,
        policies: Mapping[str, RolePolicy] = POLICIES,
        grace_seconds: float = 5.0,
        poll_seconds: float = 0.05,
        pin_actors: bool = True,
        slice_ms: float | None = None,
    ) -> None:
        self.program = program
        self.exp_dir = Path(exp_dir).resolve()
        self.policies = policies  # per role: what an exit means (policy.py)
        self.grace_seconds = grace_seconds  # SIGTERM -> SIGKILL delay when stopping
        self._problem = ""  # why the experiment failed, once it has
        self.poll_seconds = poll_seconds  # monitor loop period
        self._children = [_Child(c) for c in program.components]
        self._phase = Phase.PENDING
        self._started_at: float | None = None
        self._ended_at: float | None = None
        self._stop_requests = 0
        self._ran = False
        self._create_time = psutil.Process().create_time()
        self._pin_actors = pin_actors
        self._cpus = actor_cpus(program, pin_actors)
        # Long time slices for every component (None: SURREAL_SCHED_SLICE_MS or its default).
        self._request_slice = slice_request(slice_ms_from_env() if slice_ms is None else slice_ms)
        self._preexec = {
            c.name: _child_preexec(self._cpus.get(c.name), self._request_slice) for c in program.components
        }
        self._retiring: list[_Child] = []  # left the program; stopping
        self._program_mtime = _mtime(self.exp_dir / PROGRAM_FILE)
        self._unwritten = False  # the last state.json or log write failed (a full disk): said once

    def request_stop(self) -> None:
        """Stop every component and end as Stopped; a second request skips the grace period."""
        self._stop_requests += 1

    def state(self) -> dict[str, Any]:
        """The dict written to state.json."""
        return {
            "experiment": self.program.experiment,
            "phase": self._phase,
            "supervisor_pid": os.getpid(),
            "supervisor_create_time": self._create_time,
            "started_at": self._started_at,
            "ended_at": self._ended_at,
            "problem": self._problem,
            "program_mtime_ns": self._program_mtime,  # the program.json it runs (`scale` waits on it)
            "components": [child.to_dict() for child in self._children],
        }

    def run(self, on_tick: Callable[[], None] | None = None, tick_seconds: float = 0.5) -> Phase:
        """Run until the experiment ends; returns Succeeded, Failed or Stopped."""
        if self._ran:
            raise RuntimeError("a Supervisor runs once")
        self._ran = True
        (self.exp_dir / LOG_DIR).mkdir(parents=True, exist_ok=True)
        restore = self._install_signal_handlers()
        outcome = Phase.FAILED  # if the loop or on_tick raises, we still stop everything
        try:
            self._started_at = time.time()
            self._write_state()
            if all(self._start(child) for child in self._children):
                self._phase = Phase.RUNNING
                self._write_state()
                outcome = self._loop(on_tick, tick_seconds)
        finally:
            self._shutdown(outcome)
            restore()
        return self._phase

    def _loop(self, on_tick: Callable[[], None] | None, tick_seconds: float) -> Phase:
        next_tick = time.monotonic()
        while True:
            if self._stop_requests:
                return Phase.STOPPED
            outcome = self._step()
            if outcome is not None:
                return outcome
            if on_tick is not None and time.monotonic() >= next_tick:
                next_tick = time.monotonic() + tick_seconds
                on_tick()
            time.sleep(self.poll_seconds)

    def _step(self) -> Phase | None:
        """Reap exits and due restarts once; returns the experiment's outcome once it is decided."""
        now = time.monotonic()
        self._reload()
        self._reap_retiring(now)
        for child in self._children:
            if child.state is ComponentState.PENDING and child.proc is None and child.replaces is None:
                if not self._start(child):
                    return Phase.FAILED
                self._note(child, "started (the program changed)")
                self._write_state()
            if child.state is ComponentState.RUNNING:
                code = self._poll(child)
                if code is not None:
                    outcome = self._on_exit(child, code)
                    self._write_state()
                    if outcome is not None:
                        return outcome
            elif child.state is ComponentState.RESTARTING and now >= child.restart_at:
                started = self._start(child)
                self._write_state()
                if not started:
                    return Phase.FAILED
                self._note(child, f"restarted (restart {child.restarts}; {child.failures} failures)")
        if all(child.state in ENDED_STATES for child in self._children):
            return self._outcome("", over=True)
        return None

    def _start(self, child: _Child) -> bool:
        """Start the component; False (and the component Failed) if it cannot be executed."""
        component = child.component
        last_words = self._last_words_path(component)
        last_words.unlink(missing_ok=True)  # what an earlier life of it said
        env = {**os.environ, "PYTHONUNBUFFERED": "1", ENV_TERMINATION_LOG: str(last_words), **component.env}
        with open(self._log_path(component), "ab") as out:
            try:
                proc = subprocess.Popen(
                    component.argv,
                    cwd=self.exp_dir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # own group: a terminal Ctrl-C reaches only us
                    preexec_fn=self._preexec[component.name],
                )
            except OSError as exc:
                self._note(child, f"failed to start {component.argv[0]!r}: {exc}")
                self._problem = f"{component.name} could not start: {exc}"
                child.state = ComponentState.FAILED
                child.exit_code = 127
                return False
        child.proc = proc
        child.pid = proc.pid
        child.pid_create_time = _create_time(proc.pid)
        child.exit_code = None
        child.state = ComponentState.RUNNING
        log.info("started %s (pid %d)", component.name, proc.pid)
        return True

    def _poll(self, child: _Child) -> int | None:
        """The exit code if the child exited; its process group's leftovers are killed first."""
        assert child.proc is not None
        try:
            # WNOWAIT leaves the zombie in place, so its pid (= the group id) cannot be recycled
            # while we kill grandchildren the component left behind.
            flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
            if os.waitid(os.P_PID, child.proc.pid, flags) is None:
                return None
        except ChildProcessError:
            pass  # reaped elsewhere; Popen.wait() below still returns the code
        killpg(child.proc.pid, signal.SIGKILL)
        code = child.proc.wait()
        child.proc = None
        child.exit_code = code
        return code

    def _on_exit(self, child: _Child, code: int) -> Phase | None:
        """What the failure policy (policy.py) says of this exit, done; the experiment's outcome
        once it is decided."""
        component = child.component
        role = component.role
        policy = self.policies.get(role) or policy_of(role)
        if not component.restart:
            policy = dataclasses.replace(policy, retries=0, disruption_exits=())
        decision = decide(policy, code, child.failures)
        why = describe_exit(code)
        if decision.action is Action.DONE and role == LEARNER_ROLE and (early := unfinished(self._final())):
            decision, why = Decision(Action.FAIL_ROLE), early
        if decision.action in (Action.GIVE_UP, Action.FAIL_ROLE) and (reason := self._last_words(component)):
            why = f"{why}: {reason}"
        if decision.action is Action.DONE:
            child.state = ComponentState.SUCCEEDED
            self._note(child, "exited with code 0")
            return self._outcome(why)
        if decision.action is Action.REPLACE:
            child.restarts += 1
            child.failures += decision.counted
            child.state = ComponentState.RESTARTING
            child.restart_at = time.monotonic() + decision.delay
            if decision.counted:
                self._note(child, f"{why}; restarting in {decision.delay:.1f}s "
                           f"(failure {child.failures} of {policy.retries} allowed)")  # fmt: skip
            else:
                self._note(child, f"{why} (stopped from outside: a disruption, not a failure); "
                           f"restarting now (restart {child.restarts})")  # fmt: skip
            return None
        child.failures += decision.counted
        peers = [c for c in self._children if c.component.role == role]
        if decision.action is Action.FAIL_ROLE:
            self._note(child, f"{why}: the {role} role has failed for good (nothing to retry)")
            live = [peer for peer in peers if peer.state not in ENDED_STATES]
            running = [peer for peer in live if peer.proc is not None]
            self._stop(running, "stopping (SIGTERM): its role has failed")
            for peer in live:
                peer.state = ComponentState.FAILED
        else:
            self._note(child, f"{why}; giving up after {child.failures} failures")
        child.state = ComponentState.FAILED
        return self._outcome(why)

    def _final(self) -> dict[str, Any] | None:
        """The learner's last status.json, or None if missing or unreadable (no verdict then)."""
        return poll_metrics(self.exp_dir) or None

    def _outcome(self, why: str, over: bool = False) -> Phase | None:
        """The experiment's outcome (policy.outcome) from its components' states; `why`: how the
        last one ended; `over`: every one has."""
        roles: dict[str, list[_Child]] = {}
        for c in self._children:
            roles.setdefault(c.component.role, []).append(c)
        phase, self._problem = outcome([
            RoleEnd(role, len(peers), done=all(p.state is ComponentState.SUCCEEDED for p in peers),
                    failed=tuple(p.component.name for p in peers if p.state is ComponentState.FAILED),
                    why=why)
            for role, peers in roles.items()
        ], over)  # fmt: skip
        return phase

    def _reload(self) -> None:
        """Take a program.json that changed since it was last read (see the module docstring). A
        program that is unreadable or changes the learner is logged and ignored."""
        path = self.exp_dir / PROGRAM_FILE
        mtime = _mtime(path)
        if mtime is None or mtime == self._program_mtime:
            return
        self._program_mtime = mtime
        try:
            new = Program.from_dict(json.loads(_read_small(path)))
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
            log.error("ignoring an unreadable %s: %s", path, exc)
            return
        learners = [c for c in self.program.components if c.role == LEARNER_ROLE]
        if [c for c in new.components if c.role == LEARNER_ROLE] != learners or any(
            c.name in {x.name for x in learners} and c.role != LEARNER_ROLE for c in new.components
        ):
            log.error("ignoring %s: it changes the learner, which a running experiment keeps", path)
            return
        old = {child.component.name: child for child in self._children}
        retiring = {child.component.name: child for child in self._retiring}
        children = []
        for component in new.components:
            child = old.pop(component.name, None)
            if child is not None and child.component == component:
                children.append(child)  # unchanged (the learner always is)
                continue
            fresh = _Child(component)
            if child is not None:
                self._retire(child, "the program changed; restarting with the new command")
            # It starts once every older process of its name is gone: the one just retired, or
            # one retired earlier (a name that comes back within the grace period).
            previous = child if child in self._retiring else (child.replaces if child else None)
            fresh.replaces = previous or retiring.get(component.name)
            children.append(fresh)
        for child in old.values():
            self._retire(child, "no longer in the program; stopping (SIGTERM)")
        self.program = new
        self._children = children
        self._cpus = actor_cpus(new, self._pin_actors)
        for c in new.components:
            self._preexec[c.name] = _child_preexec(self._cpus.get(c.name), self._request_slice)
        self._write_state()

    def _retire(self, child: _Child, why: str) -> None:
        self._note(child, why)
        if child.proc is not None:
            killpg(child.proc.pid, signal.SIGTERM)
            child.retire_by = time.monotonic() + self.grace_seconds
            self._retiring.append(child)

    def _reap_retiring(self, now: float) -> None:
        for child in list(self._retiring):
            if child.proc is not None and self._poll(child) is None:
                if now > child.retire_by:
                    killpg(child.proc.pid, signal.SIGKILL)
                continue
            self._retiring.remove(child)
            self._note(child, f"retired ({describe_exit(child.exit_code or 0)})")
            for waiting in (*self._children, *self._retiring):  # retiring: a chain of one name
                if waiting.replaces is child:
                    waiting.replaces = None

    def _shutdown(self, outcome: Phase) -> None:
        """Stop whatever still runs, then record the final phase."""
        self._stop_all()
        self._phase = outcome
        self._ended_at = time.time()
        self._write_state()
        log.info("experiment %s: %s", self.program.experiment, outcome)

    def _stop_all(self) -> None:
        """SIGTERM every live process group, SIGKILL after the grace period (or a 2nd request)."""
        for child in self._children:
            if child.state not in ENDED_STATES:
                child.state = ComponentState.STOPPED
        running = [c for c in (*self._children, *self._retiring) if c.proc is not None]
        self._stop(running, "stopping (SIGTERM)")

    def _stop(self, running: list[_Child], why: str) -> None:
        """SIGTERM each child's process group, SIGKILL after the grace period (or a 2nd stop
        request); wait for their ends."""
        stop_count = self._stop_requests
        for child in running:
            assert child.proc is not None
            self._note(child, why)
            killpg(child.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_seconds
        while running and time.monotonic() < deadline and self._stop_requests <= stop_count:
            running = [c for c in running if self._poll(c) is None]
            time.sleep(self.poll_seconds)
        for child in running:
            assert child.proc is not None
            self._note(child, "did not stop in time; SIGKILL")
            killpg(child.proc.pid, signal.SIGKILL)
        for child in running:
            while self._poll(child) is None:
                time.sleep(self.poll_seconds)

    def _install_signal_handlers(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {sig: signal.getsignal(sig) for sig in _STOP_SIGNALS}
        for sig in _STOP_SIGNALS:
            signal.signal(sig, lambda signum, frame: self.request_stop())

        def restore() -> None:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

        return restore

    def _log_path(self, component: Component) -> Path:
        return self.exp_dir / LOG_DIR / f"{component.name}.log"

    def _last_words_path(self, component: Component) -> Path:
        """Its termination message (as a pod's /dev/termination-log): a component that fails for
        good says why there (surreal.component)."""
        return self.exp_dir / LOG_DIR / f"{component.name}.termination"

    def _last_words(self, component: Component) -> str:
        """The `reason` of its termination message, or ""."""
        try:
            message = json.loads(_read_small(self._last_words_path(component))[:4096])
        except (OSError, ValueError):
            return ""
        reason = message.get("reason") if isinstance(message, dict) else None
        return reason if isinstance(reason, str) else ""

    def _note(self, child: _Child, message: str) -> None:
        """Say what the supervisor did in the component's own log (and the supervisor's)."""
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        line = f"[surreal supervisor {stamp}] {child.component.name}: {message}\n"
        try:
            with open(self._log_path(child.component), "a") as out:
                out.write(line)
        except OSError as exc:
            self._cannot_write(self._log_path(child.component), exc)
        log.info("%s: %s", child.component.name, message)

    def _write_state(self) -> None:
        """state.json, as status and delete read it. A disk that will not take it (full) must not
        stop the supervisor: it goes on with the phase in memory, and the next write that passes
        (once a component's failed save has freed its space, say) records it all."""
        try:
            write_json_atomic(self.exp_dir / STATE_FILE, self.state())
        except OSError as exc:
            self._cannot_write(self.exp_dir / STATE_FILE, exc)
            return
        self._unwritten = False

    def _cannot_write(self, path: Path, exc: OSError) -> None:
        if not self._unwritten:
            log.error("cannot write %s (%s); going on, it is written again at the next change",
                      path, exc.strerror or exc)  # fmt: skip
        self._unwritten = True


def killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


_MAX_PROGRAM_BYTES = 16 << 20  # a program of 512 actor workers is well under 1 MiB


def _read_small(path: Path) -> str:
    """A regular file's text, refused when it is not one (a FIFO would block) or too large."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        data = os.read(fd, _MAX_PROGRAM_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > _MAX_PROGRAM_BYTES:
        raise ValueError(f"larger than {_MAX_PROGRAM_BYTES} bytes")
    return data.decode()


def _mtime(path: Path) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return None


def _create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None

"""What the failure policy makes of a role that keeps crashing, on real processes or real containers.

For each scenario a PPO CartPole run (2 agents, seed 1) is started detached, in a SURREAL_HOME of
its own, through the installed `surreal` command as a user would start it. Once it is Running with
env steps, every process (local) or container (containers) of one role is SIGKILLed as soon as it
appears, until `surreal status` shows the role past its budget (orchestrator/policy.py: 5 counted
exits survive, the sixth fails the role; each actor index has its own budget). Then the run is
watched to its final phase, and what is left of it is looked for:

- evaluator: the run must still be Succeeded, with an eval return (the learner evaluates its final
  version itself when no report comes);
- actors: Failed within 120 s of the last kill, `problem` naming the actors, nothing left running;
- learner: Failed within 120 s of the last kill, `problem` naming the learner, nothing left running.

Local: the pids are the supervisor's state.json's (`surreal status` shows no pids), each checked by
its start time before the kill; what is left is any process whose argv names the SURREAL_HOME.
Containers: the containers of the role are found by their labels (surreal.io/experiment and
surreal.io/component) and killed with `podman kill --signal KILL`; what is left is any running
container of the experiment, or a process (its controller) naming the SURREAL_HOME. surreal:local
is built from this tree first when its source label differs (as tests/containers does).

    python benchmarks/failure_outcomes.py --backend local|containers [--scenario evaluator|actors|learner|all]
                                          [--eval-steps 400000] [--fail-steps 2000000] [--keep-logs DIR]

One row per scenario, and exit 1 if an outcome is not the expected one (each such row says why).
Whatever a scenario created is deleted (`surreal delete`), also on an error or Ctrl-C. The actors'
and the learner's scenarios take under a minute each here (2 cores). The evaluator's runs to its
end, so its steps must outlast six kills and their backoffs (0.5 s doubling: about 16 s, plus each
restart's start); it then takes over ten minutes, as the learner waits its `final_eval_timeout`
(600 s) for a report from the evaluator that has failed before it evaluates the final version itself.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
SURREAL = shutil.which("surreal", path=str(Path(sys.executable).parent)) or shutil.which("surreal")
TERMINAL = ("Succeeded", "Failed", "Stopped")
ROLES = {"evaluator": "evaluator", "actors": "actor", "learner": "learner"}
FAIL_WITHIN = 120.0  # seconds from the last kill to a Failed phase, with nothing left running
START_TIMEOUT = {"local": 180.0, "containers": 420.0}  # to Running with env steps (2 busy cores)
KILL_TIMEOUT = 420.0  # to the role past its budget
END_TIMEOUT = 900.0  # the evaluator scenario: to the run's own end
STATUS_EVERY = 1.5  # seconds between `surreal status` reads while killing (each is a CLI start)
POLL = 0.1  # seconds between looks for a new process or container to kill


class Outcome(Exception):
    """The scenario could not be carried out as planned (it timed out, the run ended early)."""


# --- the installed CLI ----------------------------------------------------------------------------


class Cli:
    def __init__(self, home: Path) -> None:
        if SURREAL is None:
            sys.exit("the surreal command is not installed (make install)")
        self.home = home
        self.env = {**os.environ, "SURREAL_HOME": str(home)}

    def run(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(SURREAL), *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)  # fmt: skip

    def status(self, name: str) -> dict[str, Any]:
        proc = self.run("status", name, "-o", "json")
        if proc.returncode != 0:
            raise Outcome(f"surreal status {name}: exit {proc.returncode}: {proc.stderr.strip()}")
        return dict(json.loads(proc.stdout))


def role_failed(st: dict[str, Any], role: str) -> bool:
    """Whether `surreal status` shows `role` past its budget: its Job Failed (containers), or every
    component of it Failed (local)."""
    jobs = [j for j in st.get("jobs") or [] if j.get("role") == role]
    if jobs:
        return all(j.get("state") == "Failed" for j in jobs)
    parts = [c for c in st.get("components") or [] if c.get("role") == role]
    return bool(parts) and all(c.get("state") == "Failed" for c in parts)


def processes_mentioning(needle: str) -> list[psutil.Process]:
    """Live processes (not this one) whose argv names `needle` (tests/integration/cli_harness.py)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
        except psutil.Error:
            continue
        if proc.pid != os.getpid() and proc.info["status"] != psutil.STATUS_ZOMBIE and needle in cmdline:
            found.append(proc)
    return found


def described(procs: list[psutil.Process]) -> list[str]:
    return [f"pid {p.pid} {' '.join(p.info['cmdline'][:4])}" for p in procs]


# --- what is killed, and what is left, per backend ------------------------------------------------


class Local:
    """The components of a local run, by the supervisor's state.json."""

    def __init__(self, home: Path, name: str) -> None:
        self.home, self.state_file = home, home / "experiments" / name / "state.json"

    def live(self, role: str) -> list[tuple[str, Callable[[], None]]]:
        """(key, kill) for each running process of `role`; a new process has a new key."""
        try:
            state = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return []
        out = []
        for c in state.get("components", []):
            if c["role"] == role and c["state"] == "Running" and c.get("pid"):
                out.append((f"{c['name']} pid {c['pid']}", self._killer(c["pid"], c.get("pid_create_time"))))
        return out

    @staticmethod
    def _killer(pid: int, created: float | None) -> Callable[[], None]:
        def kill() -> None:
            try:
                proc = psutil.Process(pid)
                if created is None or abs(proc.create_time() - created) < 0.05:  # not a reused pid
                    proc.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass  # it died on its own meanwhile: it counts all the same

        return kill

    def leftovers(self) -> list[str]:
        return described(processes_mentioning(str(self.home)))


class Containers:
    """The containers of a containers run, by their labels, on the engine the backend uses."""

    def __init__(self, home: Path, name: str) -> None:
        from surreal.orchestrator.containers.run import engine_for

        self.home, self.name = home, name
        self.engine = engine_for(home)  # podman with the backend's settings ($SURREAL_HOME/containers.conf)

    def _ps(self) -> list[dict[str, Any]]:
        out = self.engine("ps", "--format", "json", "--filter", f"label=surreal.io/experiment={self.name}",
                          check=False)  # fmt: skip
        try:
            return list(json.loads(out or "[]"))
        except ValueError:
            return []

    def live(self, role: str) -> list[tuple[str, Callable[[], None]]]:
        out = []
        for c in self._ps():
            if (c.get("Labels") or {}).get("surreal.io/component") == role and c.get("State") == "running":
                cid, names = c["Id"], ",".join(c.get("Names") or [])
                out.append((f"{names} {cid[:12]}", self._killer(cid)))
        return out

    def _killer(self, cid: str) -> Callable[[], None]:
        def kill() -> None:
            self.engine("kill", "--signal", "KILL", cid, check=False)

        return kill

    def leftovers(self) -> list[str]:
        running = [",".join(c.get("Names") or []) for c in self._ps()]
        return running + described(processes_mentioning(str(self.home)))


# --- one scenario ---------------------------------------------------------------------------------


@dataclass
class Row:
    backend: str
    scenario: str
    kills: int = 0
    final_s: float | None = None  # last kill -> final phase
    clear_s: float | None = None  # last kill -> nothing of the run left running
    phase: str = "?"
    eval_return: float | None = None
    problem: str = ""
    leftovers: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)  # how the outcome differs from the expected one


def say(line: str) -> None:
    print(line, flush=True)


def wait_status(cli: Cli, name: str, pred: Callable[[dict[str, Any]], bool], timeout: float, what: str,
                every: float = 0.5) -> dict[str, Any]:  # fmt: skip
    deadline = time.monotonic() + timeout
    while True:
        st = cli.status(name)
        if pred(st):
            return st
        if time.monotonic() > deadline:
            raise Outcome(f"timed out after {timeout:.0f} s waiting for {what} (phase {st['phase']})")
        time.sleep(every)


def scenario(backend: str, which: str, steps: int, keep_logs: Path | None = None) -> Row:
    row, role = Row(backend, which), ROLES[which]
    home = Path(tempfile.mkdtemp(prefix="surreal-failure-"))
    # No role's word in the name: `problem` names Jobs after the experiment.
    name = f"fail-{which[0]}{uuid.uuid4().hex[:4]}"
    cli = Cli(home)
    try:
        created = cli.run("create", name, "--algo", "ppo", "--env", "CartPole-v1", "--agents", "2",
                          "--steps", str(steps), "--seed", "1", "--backend", backend, "--detach",
                          timeout=600)  # fmt: skip
        if created.returncode != 0:
            raise Outcome(f"surreal create: exit {created.returncode}: {created.stderr.strip()}")
        targets = Local(home, name) if backend == "local" else Containers(home, name)

        def going(st: dict[str, Any]) -> bool:
            if st["phase"] in TERMINAL:
                raise Outcome(f"the run ended ({st['phase']}) before anything was killed")
            return st["phase"] == "Running" and (st.get("env_steps") or 0) > 0

        st = wait_status(cli, name, going, START_TIMEOUT[backend], "Running with env steps")
        say(f"{backend} {which}: {name} Running at {st['env_steps']:,} env steps; SIGKILL every {role} "
            f"until past its budget")  # fmt: skip

        # Kill each new process (container) of the role until the role has failed.
        seen: set[str] = set()
        start = last_kill = time.monotonic()
        next_status, deadline = 0.0, start + KILL_TIMEOUT
        while True:
            for key, kill in targets.live(role):
                if key not in seen:
                    seen.add(key)
                    kill()
                    last_kill = time.monotonic()
                    row.kills += 1
                    say(f"  +{last_kill - start:6.1f} s  kill {row.kills:2d}: {key}")
            if time.monotonic() >= next_status:
                st = cli.status(name)
                next_status = time.monotonic() + STATUS_EVERY
                if role_failed(st, role) or st["phase"] in TERMINAL:
                    break
            if time.monotonic() > deadline:
                raise Outcome(
                    f"the {role} role not past its budget {KILL_TIMEOUT:.0f} s after the first kill"
                )
            time.sleep(POLL)
        past = role_failed(st, role)
        say(f"  {role} past its budget: {past} (phase {st['phase']}, {row.kills} kills)")
        if not past:
            row.wrong.append(f"the run ended ({st['phase']}) before the {role} was past its budget")

        # The final phase, timed from the last kill.
        timeout = END_TIMEOUT if which == "evaluator" else 2 * FAIL_WITHIN
        try:
            st = wait_status(cli, name, lambda s: s["phase"] in TERMINAL, timeout, "a final phase")
            row.final_s = time.monotonic() - last_kill
        except Outcome as exc:
            row.wrong.append(str(exc))
        row.phase, row.eval_return, row.problem = st["phase"], st.get("eval_return"), st.get("problem") or ""

        # What is left: given until FAIL_WITHIN after the last kill (5 s after a later final phase).
        until = max(last_kill + FAIL_WITHIN, time.monotonic() + 5.0)
        while (left := targets.leftovers()) and time.monotonic() < until:
            time.sleep(0.5)
        row.leftovers = left
        if left:
            say(f"  still running {time.monotonic() - last_kill:.0f} s after the last kill: {left}")
        else:
            row.clear_s = time.monotonic() - last_kill
        if row.phase in TERMINAL:  # what the run keeps once all is over (containers: the record's)
            st = cli.status(name)
            if st["phase"] != row.phase:
                row.wrong.append(f"the final phase {row.phase} became {st['phase']}")
            row.phase, row.eval_return, row.problem = (
                st["phase"],
                st.get("eval_return"),
                st.get("problem") or "",
            )
        expect(row, role)
        return row
    except Outcome as exc:
        row.wrong.append(str(exc))
        return row
    finally:
        with shielded():
            logs = home / "experiments" / name / "logs"
            if keep_logs is not None and logs.is_dir():
                shutil.copytree(logs, keep_logs / f"{backend}-{which}", dirs_exist_ok=True)
            if (home / "experiments" / name).exists():
                proc = cli.run("delete", name, timeout=900)
                if proc.returncode != 0:
                    row.wrong.append(f"surreal delete {name}: exit {proc.returncode}: {proc.stderr.strip()}")
            shutil.rmtree(home, ignore_errors=True)


def expect(row: Row, role: str) -> None:
    if row.scenario == "evaluator":
        if row.phase != "Succeeded":
            row.wrong.append(f"phase {row.phase}, expected Succeeded")
        if row.eval_return is None:
            row.wrong.append("no eval return")
        return
    if row.phase != "Failed":
        row.wrong.append(f"phase {row.phase}, expected Failed")
    if role not in row.problem:
        row.wrong.append(f"the problem does not name the {role}")
    if row.final_s is None or row.final_s > FAIL_WITHIN:
        row.wrong.append(f"not final within {FAIL_WITHIN:.0f} s of the last kill")
    if row.leftovers:
        row.wrong.append(f"{len(row.leftovers)} left running {FAIL_WITHIN:.0f} s after the last kill")


@contextmanager
def shielded() -> Iterator[None]:
    """Ctrl-C and SIGTERM wait while what was created is deleted."""
    old = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def ensure_image() -> None:
    """surreal:local from this tree, as the container tests build it (their pip mounts included)."""
    sys.path.insert(0, str(REPO / "tests" / "containers"))
    from conftest import build_image  # type: ignore[import-not-found]

    from surreal.orchestrator.containers.run import engine_for

    workdir = Path(tempfile.mkdtemp(prefix="surreal-image-"))
    try:
        say("surreal:local: checking it is this tree's image (a build takes minutes)")
        error = build_image(engine_for(workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if error:
        sys.exit(error)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("local", "containers"), required=True)
    parser.add_argument("--scenario", choices=(*ROLES, "all"), default="all")
    parser.add_argument("--eval-steps", type=int, default=400_000,
                        help="the evaluator scenario's steps: the run must outlast the kills")  # fmt: skip
    parser.add_argument("--fail-steps", type=int, default=2_000_000,
                        help="the actors' and learner's runs' steps: still going when they fail")  # fmt: skip
    parser.add_argument("--keep-logs", type=Path, metavar="DIR",
                        help="copy each run's logs/ to DIR/BACKEND-SCENARIO before deleting it")  # fmt: skip
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, interrupt)
    if args.backend == "containers":
        ensure_image()
    rows = []
    try:
        for which in ROLES if args.scenario == "all" else (args.scenario,):
            steps = args.eval_steps if which == "evaluator" else args.fail_steps
            rows.append(scenario(args.backend, which, steps, args.keep_logs))
    except KeyboardInterrupt:
        sys.exit("interrupted (what was created is deleted)")
    head = (
        "backend",
        "scenario",
        "kills",
        "final_s",
        "clear_s",
        "phase",
        "eval_return",
        "leftovers",
        "problem",
    )
    cells = [
        (
            r.backend,
            r.scenario,
            str(r.kills),
            "-" if r.final_s is None else f"{r.final_s:.1f}",
            "-" if r.clear_s is None else f"{r.clear_s:.1f}",
            r.phase,
            "None" if r.eval_return is None else f"{r.eval_return:.1f}",
            "; ".join(r.leftovers) or "none",
            r.problem or "-",
        )
        for r in rows
    ]
    widths = [max(len(c[i]) for c in (head, *cells)) for i in range(len(head) - 1)]
    say("")
    for cols in (head, *cells):
        say("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=False)) + "  " + cols[-1])
    wrong = [f"{r.backend} {r.scenario}: {w}" for r in rows for w in r.wrong]
    for line in wrong:
        say(f"WRONG {line}")
    verdict = "see WRONG" if wrong else "all outcomes as expected"
    say(f"final_s, clear_s: seconds from the last kill to a final phase in `surreal status`, and to "
        f"nothing of the run left running (expected within {FAIL_WITHIN:.0f} s for actors and learner); "
        f"{verdict}")  # fmt: skip
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()

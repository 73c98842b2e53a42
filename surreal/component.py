"""The one entry point of every component on every backend: `surreal component ROLE --spec FILE`.

Addresses and secrets come from environment variables set by the launcher (127.0.0.1 locally, a
Service's DNS name in a cluster), so a component cannot tell which backend runs it.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from surreal.algorithms.registry import get_algorithm
from surreal.orchestrator import program as prog
from surreal.orchestrator import sizing
from surreal.orchestrator.launcher import start_jobs_watch as start_watch
from surreal.protocol.ratelimit import RateLimitFilter
from surreal.runtime import preemption
from surreal.runtime.envs.make import use_resolved
from surreal.runtime.envs.ref import import_path_from_environ
from surreal.runtime.exits import EXIT_PREEMPTED
from surreal.runtime.run import RoleFailed, RunContext, rank_from_environ
from surreal.spec import ExperimentSpec, load_spec_file

EXIT_SECONDS = 30.0  # from the end of a component's work to its process being gone, at most


class ComponentError(RuntimeError):
    pass


def read_token() -> str:
    token = os.environ.get(prog.ENV_TOKEN)
    if token:
        return token
    path = os.environ.get(prog.ENV_TOKEN_FILE)
    if path:
        return Path(path).read_text().strip()
    raise ComponentError(f"neither {prog.ENV_TOKEN} nor {prog.ENV_TOKEN_FILE} is set")


def build_context(spec: ExperimentSpec, index: int) -> RunContext:
    learner_addr = os.environ.get(prog.ENV_LEARNER_ADDR)
    if not learner_addr:
        raise ComponentError(
            f"environment variable {prog.ENV_LEARNER_ADDR} is not set (the launcher sets it)"
        )
    return RunContext(
        env_id=spec.env,
        seed=spec.seed,
        total_steps=spec.steps,
        num_agents=spec.agents,
        exp_dir=Path(os.environ.get(prog.ENV_EXP_DIR, ".")),
        learner_addr=learner_addr,
        token=read_token(),
        index=index,
        agents_in_worker=int(os.environ.get(prog.ENV_AGENTS_IN_WORKER, "1")),
        bind_all=os.environ.get(prog.ENV_BIND_HOST) == "0.0.0.0",
        env_kwargs=dict(spec.env_kwargs),
        learners=spec.learners,
        rank=learner_rank(),
        replay_addr=os.environ.get(prog.ENV_REPLAY_ADDR, ""),
    )


def learner_rank() -> int:
    """This process's learner rank (torch's elastic agent sets RANK for each rank it starts)."""
    found = rank_from_environ()
    return found[0] if found is not None else 0


def worker_index(role: str, index: int) -> int:
    """An actor pod's index is its Indexed Job's completion index (JOB_COMPLETION_INDEX; the pods
    share a template that says `--index 0`), which its replacement keeps; elsewhere `index` stands."""
    job_index = os.environ.get(prog.ENV_JOB_INDEX)
    if role not in (prog.ACTOR_ROLE, prog.REPLAY_ROLE) or not job_index:
        return index
    try:
        return int(job_index)
    except ValueError:
        raise ComponentError(f"{prog.ENV_JOB_INDEX}={job_index!r} is not an integer") from None


# What a finished learner leaves as its container's termination message (at most 4096 bytes are
# kept): enough for `kubectl get pod -o jsonpath` and `surreal status` once the pod is gone.
FINAL_FIELDS = (
    "env_steps", "updates", "policy_version", "episodes", "train_return", "eval_return",
    "best_eval_return", "eval_stderr", "eval_episodes", "elapsed_seconds", "checkpoint_version", "agents",
    "group_restarts",
)  # fmt: skip


def write_termination_message(
    exp_dir: Path, code: int, failed: RoleFailed | None = None, *, learner: bool = True
) -> None:
    """The learner's last status.json, cut to FINAL_FIELDS, into SURREAL_TERMINATION_LOG (the pod's
    /dev/termination-log), with how it ended: Succeeded, Preempted or Failed for good (`failed`'s
    reason, the local supervisor's `problem`); another role writes only a failure for good. A crash
    writes nothing: the pod's terminationMessagePolicy falls back to the log's tail."""
    path = os.environ.get(prog.ENV_TERMINATION_LOG)
    if not path or (failed is None and (code not in (0, EXIT_PREEMPTED) or not learner)):
        return
    if failed is None and os.environ.get(prog.ENV_FIRST_LEARNER_POD, "0") != "0":
        return  # a learner pod past the first (--learner-pods): rank 0's pod reports the run
    try:
        status = json.loads((exp_dir / "status.json").read_text()) if learner else {}
    except (OSError, ValueError):
        status = {}
    phase = "Failed" if failed is not None else "Succeeded" if code == 0 else "Preempted"
    message: dict[str, object] = {"phase": phase, "exit_code": code}
    if failed is not None:
        message["reason"] = str(failed)[:1024]
    message.update({k: status.get(k) for k in FINAL_FIELDS if k in status})
    try:
        Path(path).write_text(json.dumps(message, separators=(",", ":"))[:4096])
    except OSError as exc:
        logging.getLogger(__name__).warning("cannot write the termination message to %s: %s", path, exc)


def run_ranks(config: Any, ctx: RunContext) -> int:
    """The learner of `ctx.learners` ranks: this very command run as each rank, supervised."""
    from surreal.orchestrator.rank_agent import launch_ranks  # torch, only where ranks run

    join = getattr(config, "rank_join_seconds", None)
    return launch_ranks(ctx.learners, *([datetime.timedelta(seconds=join)] if join else []))


def run_component(role: str, spec_path: Path, index: int) -> int:
    # A launcher (or a preempted node) stops components with SIGTERM: a clean exit, so `finally`
    # blocks run; a training learner first finishes its update and saves (preemption.py).
    signal.signal(signal.SIGTERM, preemption.on_sigterm)
    # stderr is the component's log file (logs/<name>.log locally, `kubectl logs` in a pod).
    # Learner ranks share the learner's log: each line says whose it is.
    who = f"rank {learner_rank()} " if role == "learner" and rank_from_environ() is not None else ""
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format=f"%(asctime)s {who}%(levelname)s %(name)s: %(message)s"
    )
    # grpc logs some errors itself, one record per bad call: those never fill the log either.
    for handler in logging.getLogger().handlers:
        handler.addFilter(RateLimitFilter(prefixes=("grpc",)))
    # A user's environment module is found where the creating shell found it (locally) or in the
    # image (Kubernetes); building the role's environments imports it (and loading a spec that
    # has no `resolved` section).
    import_path_from_environ()
    spec = load_spec_file(spec_path)
    if spec.resolved is not None:
        # The environment's spaces as `surreal create` found them: a role that asks spaces_for
        # (learners, evaluators) builds no throwaway environment to learn them again.
        use_resolved(spec.resolved)
    ctx = build_context(spec, worker_index(role, index))
    if rank_from_environ() is None:
        preemption.on_force_exit(
            lambda f: write_termination_message(ctx.exp_dir, f.code, f, learner=role == prog.LEARNER_ROLE)
        )
    main = get_algorithm(spec.algo).role_main(role)
    if role == prog.LEARNER_ROLE and rank_from_environ() is None:
        measure_again(spec, ctx.exp_dir)
    if role == prog.LEARNER_ROLE and ctx.learners > 1 and rank_from_environ() is None:
        main = run_ranks  # this process starts the learner's ranks (each runs `main`) and watches them
    code = 1
    watch = start_jobs_watch(role)
    try:
        failed = None
        try:
            code = int(main(spec.config, ctx))
        except RoleFailed as exc:  # retrying cannot help: one of the role's fatal exits
            logging.getLogger(__name__).error("%s", exc)
            code, failed = exc.code, exc
        if code == EXIT_PREEMPTED and failed is None and preemption.failure() is not None:
            # It saved and left because its role failed elsewhere (stop_for): that is its exit.
            failed = preemption.failure()
            assert failed is not None
            logging.getLogger(__name__).error("%s", failed)
            code = failed.code
        if rank_from_environ() is None:  # not a learner rank: its ranks' agent reports for it
            write_termination_message(ctx.exp_dir, code, failed, learner=role == "learner")
    finally:
        if watch is not None:
            watch.stop()
        exit_within(EXIT_SECONDS, code)
    return code


def measure_again(spec: ExperimentSpec, exp_dir: Path) -> str | None:
    """A learner on another machine than the one create measured on (a pod's CPU is seldom the
    laptop's) measures again before it starts, once per machine (kept beside its checkpoints), and
    logs what the packing would be here; the line, or None where nothing was measured again."""
    done = spec.sizing or {}
    if "measured_on" not in done or done["measured_on"] == sizing.machine():
        return None
    log = logging.getLogger(__name__)
    try:
        found = sizing.measurer(spec, cache=exp_dir / "calibration")(int(done["measured_agents_in_worker"]))
    except Exception as exc:  # the learner will meet it again, and say so where it is
        log.warning("sizing: could not measure again on this machine: %s", " ".join(str(exc).split())[:200])
        return None
    need = spec.learners * found.learner_steps_per_second / found.actor_steps_per_second
    here, there = sizing.machine(), done["measured_on"]
    line = (f"sizing: measured again on {here} (create measured on {there}): one "
            f"learner consumes ~{found.learner_steps_per_second:,.0f} env steps/s, one actor CPU makes "
            f"~{found.actor_steps_per_second:,.0f} with {found.agents_in_worker} agents: ~{need:.2f} "
            f"actor CPUs keep {'it' if spec.learners == 1 else 'the ranks'} busy, against "
            f"{done['workers'] * done['actor_cpu']:g} asked ({done['why']})")  # fmt: skip
    log.info("%s", line)
    return line


def start_jobs_watch(role: str) -> Any:
    """The watch of the experiment's Jobs its backend gives this component (launcher.start_jobs_watch),
    started, or None. The learner (or its ranks' agent; never a rank) stops as on SIGTERM and exits
    with the watch's fatal code and reason; actors and the evaluator exit 0 at once."""
    if rank_from_environ() is not None:
        return None
    return start_watch(role, stop_learner if role == prog.LEARNER_ROLE else end_worker)


def stop_learner(ending: Any) -> None:
    """The learner's role has failed elsewhere (`ending`: a fatal code and why): it saves and
    leaves as on SIGTERM, then exits so (run_component)."""
    preemption.stop_for(RoleFailed(ending.code, ending.reason))


def end_worker(ending: Any) -> None:
    """An actor's or the evaluator's work is over (its learner's Job ended): exit `ending.code` now,
    from the watch's thread, whatever the main thread waits on; a worker has nothing to save."""
    logging.getLogger(__name__).info("%s: exiting %d", ending.reason, ending.code)
    logging.shutdown()
    os._exit(ending.code)


def exit_within(seconds: float, code: int) -> None:
    """Make sure the process is gone `seconds` from now. A component's work is done; what is left
    is the interpreter's own shutdown, which joins every non-daemon thread (grpc's pool among
    them). Whatever a peer did to one of those, the experiment must still end."""

    def force() -> None:
        time.sleep(seconds)
        logging.getLogger(__name__).error("still exiting after %.0f s; forcing exit %d", seconds, code)
        logging.shutdown()
        os._exit(code)

    threading.Thread(target=force, name="surreal-exit-watchdog", daemon=True).start()

"""The ES learner role (the master): serves `ESMaster` over the protocol.

Workers fetch (version, parameters, nonce, normalization) with Parameters.Get and send result
batches up their experience stream; ES messages are tiny, so one stream per worker process is
plenty and the server is sized for as many streams as there could be workers (one per logical
agent at most, on any backend).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from pathlib import Path
from typing import Any

from surreal.algorithms.common.checkpoint import write_json
from surreal.algorithms.common.envs import EnvBatch, spaces_for
from surreal.algorithms.common.evaluator import evaluate
from surreal.algorithms.common.run import RunContext, extras_done
from surreal.algorithms.es.config import ESConfig
from surreal.algorithms.es.evaluator import deterministic_policy
from surreal.algorithms.es.master import ESMaster
from surreal.algorithms.es.results import results_schema
from surreal.protocol.server import LearnerServer
from surreal.protocol.types import EvalReport

log = logging.getLogger(__name__)

UNARY_THREADS = 4  # the server keeps this many pool threads free of streams (LearnerServer)
SPARE_STREAMS = 8  # streams of restarted workers that the server has not yet seen close


def max_streams(num_agents: int) -> int:
    """Experience streams the master must accept: every worker hosts at least one agent."""
    return num_agents + SPARE_STREAMS


def run_learner(cfg: ESConfig, ctx: RunContext) -> int:
    """Serve results and parameters until `total_steps` env steps of accepted results are in and
    the final version is evaluated; exit 0. Resumes from the last checkpoint in `ctx.exp_dir`."""
    cfg.validate()
    spaces = spaces_for(ctx.env_id)
    master = ESMaster(cfg, spaces, ctx.total_steps, ctx.num_agents, seed=ctx.seed, exp_dir=ctx.exp_dir)
    evals: queue.SimpleQueue[EvalReport] = queue.SimpleQueue()
    snapshot = {"status": master.status()}  # grpc threads read it; the main loop replaces it
    server = LearnerServer(
        token=ctx.token,
        experience_schema=results_schema(spaces.obs_dim),
        host="0.0.0.0" if ctx.bind_all else ctx.learner_host,
        port=ctx.learner_port,
        credits_per_stream=cfg.credits_per_worker,
        max_workers=max_streams(ctx.num_agents) + UNARY_THREADS,
        status_provider=lambda: snapshot["status"],
        on_eval=evals.put,
    )
    server.start()
    loop = _Loop(master, server, evals, snapshot, ctx.exp_dir / "status.json")
    try:
        loop.train()
        loop.await_final_eval(cfg.final_eval_timeout if ctx.has_evaluator else 0.0)
        if not master.final_evaluated:
            log.warning("no evaluation of the final version arrived; evaluating it here")
            params = master.params()
            envs = EnvBatch(ctx.env_id, cfg.eval_episodes, seed=ctx.seed * 1_000_003 + 7)
            result = evaluate(envs, deterministic_policy(cfg, spaces, params))
            envs.close()
            master.record_eval(result.report(params.version, master.counters.env_steps))
        loop.write_status()
        loop.release_workers(timeout=15.0)
        if ctx.linger:
            # Keep answering status, health and the final parameters until the pod is deleted.
            log.info("run complete; serving status until stopped")
            threading.Event().wait()
        return 0
    finally:
        server.stop()
        master.close()


class _Loop:
    """The master's main loop: result batches -> updates -> published params, status ~1/s."""

    def __init__(
        self,
        master: ESMaster,
        server: LearnerServer,
        evals: queue.SimpleQueue[EvalReport],
        snapshot: dict[str, dict[str, Any]],
        status_path: Path,
    ) -> None:
        self.master, self.server, self.evals = master, server, evals
        self.snapshot, self.status_path = snapshot, status_path
        self._status_at = 0.0

    def train(self) -> None:
        master, server = self.master, self.server
        server.publish(params := master.params())
        while not master.done:
            fragment = server.next_fragment(timeout=0.25)
            if fragment is not None:
                master.add_results(fragment.tensors)
            if master.ready():
                master.update()
                server.publish(params := master.params())
            self.tick()
        if not extras_done(params.extras):  # announce the end under a new version number
            master.new_version()
            server.publish(master.params())
        master.save()

    def await_final_eval(self, timeout: float) -> None:
        """Wait for the evaluator's report on the final version; keep taking (and discarding)
        result batches so that workers blocked on credits get to refresh and see `done`."""
        deadline = time.monotonic() + timeout
        while not self.master.final_evaluated and time.monotonic() < deadline:
            fragment = self.server.next_fragment(timeout=0.25)
            if fragment is not None:
                self.master.add_results(fragment.tensors)
            self.tick()

    def release_workers(self, timeout: float) -> None:
        """Serve until every worker has seen `done` and hung up (or `timeout`)."""
        deadline = time.monotonic() + timeout
        while self.server.stats.get("connected_streams", 0) and time.monotonic() < deadline:
            self.server.next_fragment(timeout=0.1)

    def tick(self) -> None:
        while True:
            try:
                self.master.record_eval(self.evals.get_nowait())
            except queue.Empty:
                break
        if time.monotonic() - self._status_at >= 1.0:
            self.write_status()

    def write_status(self) -> None:
        self._status_at = time.monotonic()
        connected = self.server.stats.get("connected_streams", 0)
        self.snapshot["status"] = status = self.master.status(connected)
        write_json(self.status_path, status)

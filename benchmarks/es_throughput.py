"""ES throughput and protocol load, side by side in one run on the same cores.

(a) raw HalfCheetah-v5 env stepping (fixed random actions, no policy), one process per core;
(b) ES evaluation throughput: `surreal create --algo es --env HalfCheetah-v5` through the real CLI
    and local backend, env steps evaluated per second (accepted and stale results) over the
    run's steady part, and the ratio (b)/(a) (target >= 0.7);
(c) protocol load: one ES master (`surreal component learner`, CartPole-v1, 512 agents) and 512
    concurrent client streams, each a logical agent that fetches its hand-out and reports a
    result for every pair at once, for a bounded time: results/s, p50/p99 call latency, failed
    calls (target 0), and the master's RSS sampled over time (it must not grow with the time).

    python benchmarks/es_throughput.py [--steps 400000] [--agents 16] [--streams 512] [--seconds 20]

Shared machines are noisy: read the ratios of one run, not absolute figures across runs.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from bench_support import TOKEN, read_json, rss_line, start_learner
from raw_stepping import raw_rate

ENV_ID = "HalfCheetah-v5"


# --- (b) ES evaluation throughput -----------------------------------------------------------


def es_rate(steps: int, agents: int) -> dict:
    """Run `surreal create --algo es` in the foreground; sample status.json as it runs."""
    home = Path(tempfile.mkdtemp(prefix="surreal-es-bench-"))
    try:
        argv = [sys.executable, "-m", "surreal", "create", "bench", "--algo", "es", "--env", ENV_ID,
                "--agents", str(agents), "--steps", str(steps), "--seed", "0",
                "--set", "eval_episodes=1", "--set", f"eval_interval={10 * steps}"]  # fmt: skip
        proc = subprocess.Popen(argv, env={**os.environ, "SURREAL_HOME": str(home)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        status_path = home / "experiments" / "bench" / "status.json"
        samples: list[tuple[float, int]] = []  # (time, env steps evaluated)
        while proc.poll() is None:
            st = read_json(status_path)
            if st and not st.get("done"):
                samples.append((time.monotonic(), st["env_steps"]))
            time.sleep(0.5)
        if proc.returncode != 0:
            sys.exit(f"surreal create failed with exit code {proc.returncode}")
        final = read_json(status_path)
        # The steady part: from 20% of the evaluated steps to the last sample before the end.
        steady = [s for s in samples if s[1] >= 0.2 * samples[-1][1]]
        (t0, s0), (t1, s1) = steady[0], steady[-1]
        return {"rate": (s1 - s0) / (t1 - t0), "final": final}
    finally:
        shutil.rmtree(home, ignore_errors=True)


# --- (c) protocol load ----------------------------------------------------------------------


def _agent_loop(client, agent: int, deadline: float, stats: dict, lock: threading.Lock) -> None:
    from surreal.protocol.client import ProtocolError
    from surreal.runtime.actor import idle_backoff
    from surreal.runtime.es.noise import pair_seed
    from surreal.runtime.es.results import pack_batch

    moments = {"obs_count": np.zeros(1), "obs_mean": np.zeros(4), "obs_m2": np.zeros(4)}
    rng = np.random.default_rng(agent)
    get_lat, send_lat, sent, failed = [], [], 0, 0
    known, nonce, pairs, next_pair, idle_polls = -1, 0, 0, 0, 0
    stream = client.experience(f"load-{agent}")
    while time.perf_counter() < deadline:
        try:
            t0 = time.perf_counter()
            params = client.get_params(known, timeout=10.0)
            get_lat.append(time.perf_counter() - t0)
            if params is not None:
                known, next_pair = params.version, 0
                nonce = int(params.extras["nonce"][0])
                pairs = int(params.extras["pairs_per_agent"][0])
            if known < 0 or next_pair >= pairs:
                time.sleep(idle_backoff(idle_polls))
                idle_polls += 1
                continue
            idle_polls = 0
            r = rng.normal(100.0, 10.0, 2)
            row = (agent, next_pair, pair_seed(nonce, agent, next_pair), known, r[0], r[1], 20, 20)
            next_pair += 1
            t0 = time.perf_counter()
            stream.send(known, pack_batch([row], moments), timeout=10.0)
            send_lat.append(time.perf_counter() - t0)
            sent += 1
        except (ProtocolError, TimeoutError):
            failed += 1
            time.sleep(0.1)
    stream.close()
    with lock:
        stats["get"] += get_lat
        stats["send"] += send_lat
        stats["sent"] += sent
        stats["failed"] += failed


def _load_client(addr: str, agents: list[int], deadline: float, out: mp.Queue) -> None:
    from surreal.protocol.client import LearnerClient

    # The clients stand in for workers on other machines: they get the CPU the master leaves.
    os.nice(10)

    clients = [LearnerClient(addr, TOKEN) for _ in range(max(1, len(agents) // 32))]
    stats: dict = {"get": [], "send": [], "sent": 0, "failed": 0}
    lock = threading.Lock()
    threads = [
        threading.Thread(target=_agent_loop, args=(clients[i % len(clients)], a, deadline, stats, lock))
        for i, a in enumerate(agents)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in clients:
        c.close()
    out.put(stats)


def load_test(streams: int, seconds: float, processes: int = 4) -> dict:
    import psutil

    from surreal.protocol.client import LearnerClient

    tmp = Path(tempfile.mkdtemp(prefix="surreal-es-load-"))
    master, addr = start_learner(tmp, {"algo": "es", "env": "CartPole-v1", "agents": streams,
                                       "steps": 10**12})  # fmt: skip
    try:
        probe = LearnerClient(addr, TOKEN)
        probe.wait_ready(60.0)
        before = probe.status()
        ctx = mp.get_context("spawn")
        out: mp.Queue = ctx.Queue()
        start = time.perf_counter()
        deadline = start + 3.0 + seconds  # 3 s for the clients to start
        chunks = np.array_split(np.arange(streams), processes)
        procs = [ctx.Process(target=_load_client, args=(addr, c.tolist(), deadline, out)) for c in chunks]
        for p in procs:
            p.start()
        rss: list[tuple[float, int]] = []
        proc = psutil.Process(master.pid)
        while time.perf_counter() < deadline:
            rss.append((time.perf_counter() - start, proc.memory_info().rss))
            time.sleep(0.5)
        after = probe.status()
        cpu = proc.cpu_times()
        results = [out.get() for _ in procs]
        for p in procs:
            p.join()
        probe.close()
    finally:
        master.terminate()
        master.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)
    get = np.array([x for r in results for x in r["get"]])
    send = np.array([x for r in results for x in r["send"]])
    both = np.concatenate([get, send])
    accepted = after["results_accepted"] - before["results_accepted"]
    return {
        "seconds": seconds,
        "sent_per_s": sum(r["sent"] for r in results) / (seconds + 3.0),
        "accepted_per_s": accepted / (seconds + 3.0),
        "agents_reporting": after["agents_reporting"],
        "rejected": after["results_rejected"],
        "updates": after["updates"] - before["updates"],
        "calls": len(both),
        "failed": sum(r["failed"] for r in results),
        "p50_ms": 1e3 * float(np.percentile(both, 50)),
        "p99_ms": 1e3 * float(np.percentile(both, 99)),
        "get_p50_ms": 1e3 * float(np.percentile(get, 50)),
        "get_p99_ms": 1e3 * float(np.percentile(get, 99)),
        "send_p50_ms": 1e3 * float(np.percentile(send, 50)),
        "send_p99_ms": 1e3 * float(np.percentile(send, 99)),
        "rss": rss,
        "master_cpu_s": cpu.user + cpu.system,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400_000, help="env steps of the ES run (b)")
    parser.add_argument("--agents", type=int, default=16, help="logical agents of the ES run (b)")
    parser.add_argument("--streams", type=int, default=512, help="client streams of the load test")
    parser.add_argument("--seconds", type=float, default=20.0, help="duration of the load test")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()

    print(f"{ENV_ID} on {args.cores} cores", flush=True)
    a = raw_rate(ENV_ID, args.cores)
    print(f"(a) raw env stepping, {args.cores} processes          {a:10,.0f} steps/s", flush=True)
    b = es_rate(args.steps, args.agents)
    print(f"(b) ES evaluation, {args.agents} agents               {b['rate']:10,.0f} steps/s", flush=True)
    print(f"    (b)/(a)                                 {b['rate'] / a:10.2f}   (target >= 0.7)", flush=True)
    c = load_test(args.streams, args.seconds)
    rss = c["rss"]
    half = [b for t, b in rss if t >= rss[-1][0] / 2]
    print(f"(c) load test: {args.streams} streams, {c['seconds']:.0f} s (+3 s start-up), one master")
    print(f"    results sent/s {c['sent_per_s']:9,.0f}   accepted/s {c['accepted_per_s']:9,.0f}   "
          f"updates {c['updates']}   agents reporting {c['agents_reporting']}")  # fmt: skip
    print(f"    calls {c['calls']:,}   failed {c['failed']} (target 0)   latency p50 {c['p50_ms']:.1f} ms"
          f"  p99 {c['p99_ms']:.1f} ms")  # fmt: skip
    print(f"      Parameters.Get p50 {c['get_p50_ms']:.1f} ms  p99 {c['get_p99_ms']:.1f} ms;  "
          f"result send p50 {c['send_p50_ms']:.2f} ms  p99 {c['send_p99_ms']:.2f} ms")  # fmt: skip
    print(f"    master CPU {c['master_cpu_s'] / (c['seconds'] + 3.0):.0%} of one core")
    print(f"    rejected {json.dumps({k: v for k, v in c['rejected'].items() if v})}")
    print(f"    master RSS  {rss_line(rss)}")
    print(f"    master RSS peak {max(b for _, b in rss) / 2**20:.1f} MiB; second half "
          f"{min(half) / 2**20:.1f}..{max(half) / 2**20:.1f} MiB")  # fmt: skip


if __name__ == "__main__":
    main()

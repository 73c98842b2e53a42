"""How many actors can one learner feed? Its two ceilings, for M simulated actors.

M actors are real gRPC clients (asyncio, one connection each, spread over a few processes) sending
realistic HalfCheetah-v5 fragments as fast as the learner's credits allow; like a real actor, each
asks for parameters (Parameters.Get) whenever its credits say a newer version is out. A fragment is
what one actor of the default preset scaled to M agents sends (`agents_per_pod` 1 on Kubernetes:
T steps of its envs, 128 x 1 at 64 agents and more), made by a real Actor once and sent again.

(1) protocol: the learner's server alone (decode, check against the schema, queue, credit), the
    fragments taken and dropped: the most experience the protocol can take in.
(2) ppo: the real learner component (`surreal component learner`, default preset for M agents, on
    the CPU here) checking and training on what arrives; with `--learners 1,2,...` once per rank
    count (learner ranks: actor i sends to rank i % N), with each update's time in collectives
    (the all-reduces, waiting for the slowest rank included) and its share of the update. With
    `--pods 1,2` each rank count > 1 also runs as that many learner pods (`--learner-pods`): each
    pod a network namespace on a bridge (PodBridge, as pods of one node are wired: a veth each),
    so the ranks' all-reduces cross the pods' veths instead of one pod's loopback; the actors
    reach each pod at its address. Needs root. What one machine cannot show: a real network
    between nodes (its bandwidth and latency add to the collectives' time).

For each: fragments/s and env steps/s taken, updates/s, the p50/p99 of a fragment's wait for a
credit, the learner's CPU and RSS over time, failed calls (must be 0).

    python benchmarks/learner_ceiling.py [--streams 64,256,512] [--seconds 20] [--clients 4]
                                         [--modes protocol,ppo] [--learners 1,2] [--pods 1,2]

Shared machines are noisy: read one run's figures together.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from bench_support import TOKEN, PodBridge, free_port, read_json, rss_line, start_learner, start_learner_pods

ENV_ID = "HalfCheetah-v5"
STREAM = "/surreal.v1.Experience/Stream"
GET = "/surreal.v1.Parameters/Get"
MD = (("x-surreal-token", TOKEN),)
START_SECONDS = 8.0  # for the clients to connect and fetch parameters before the window opens


# --- the fragment a simulated actor sends ------------------------------------------------------


def actor_fragment(agents: int) -> dict[str, np.ndarray]:
    """One fragment of one actor of the default HalfCheetah preset scaled to `agents` agents."""
    from surreal.algorithms.ppo import PPO
    from surreal.algorithms.ppo.presets import preset_for
    from surreal.runtime.envs.make import spaces_for
    from surreal.runtime.onpolicy.actor import Actor
    from surreal.runtime.onpolicy.learner import Learner

    cfg = preset_for(ENV_ID, agents)
    actor = Actor(cfg, ENV_ID, cfg.envs_per_agent, seed=0)
    actor.set_params(Learner(PPO(), cfg, spaces_for(ENV_ID), 10**9).params())
    try:
        return actor.collect()
    finally:
        actor.close()


# --- (1) the protocol alone: a server that takes fragments and drops them ----------------------


def serve_sink(port: int, streams: int) -> None:
    """A LearnerServer with PPO's experience schema whose learner only takes fragments."""
    from surreal.protocol import LearnerServer, Params
    from surreal.runtime.envs.make import spaces_for
    from surreal.runtime.onpolicy.fragment import experience_schema

    counts = {"fragments": 0, "env_steps": 0}
    server = LearnerServer(
        token=TOKEN, experience_schema=experience_schema(spaces_for(ENV_ID)), port=port,
        max_streams=streams + 8, status_provider=lambda: dict(counts),
    )  # fmt: skip
    server.start()
    server.publish(Params(0, {}, {}))  # Parameters.Get answers "unchanged" to version 0
    while True:
        fragment = server.next_fragment(timeout=1.0)
        if fragment is not None:
            counts["fragments"] += 1
            counts["env_steps"] += fragment.tensors["rewards"].size


# --- the simulated actors ----------------------------------------------------------------------


@dataclass
class ClientStats:
    sent: int = 0
    failed: int = 0
    errors: list[str] | None = None  # what the failed calls said
    waits: list[float] | None = None  # seconds each fragment waited for its credit, in the window


async def _actor(addr: str, worker: str, payload, window: tuple[float, float], stats: ClientStats) -> None:
    import grpc

    from surreal.protocol.options import client_options
    from surreal.protocol.v1 import surreal_pb2 as pb

    start, end = window
    options = [*client_options(64 * 2**20), ("grpc.use_local_subchannel_pool", 1)]  # own connection
    async with grpc.aio.insecure_channel(addr, options=options) as channel:
        stream = channel.stream_stream(STREAM, request_serializer=None,
                                       response_deserializer=pb.Credit.FromString)  # fmt: skip
        get = channel.unary_unary(GET, request_serializer=None, response_deserializer=pb.Params.FromString)
        call = stream(metadata=MD)
        credits, latest = asyncio.Semaphore(0), [-1]  # the version the credits say is current

        async def read_credits() -> None:
            async for credit in call:
                if credit.HasField("latest_version"):
                    latest[0] = credit.latest_version
                for _ in range(credit.credits):
                    credits.release()

        reader = asyncio.create_task(read_credits())
        await call.write(pb.ExperienceRequest(hello=pb.Hello(worker_id=worker)).SerializeToString())
        known = -1
        try:
            # As a real actor starts: the parameters first. Then every actor waits for the others,
            # so that the window sees the steady state, not 512 clients connecting at once.
            reply = await get(pb.GetParams(known_version=known).SerializeToString(), metadata=MD,
                              timeout=60.0)  # fmt: skip
            known = reply.version
            await asyncio.sleep(max(0.0, start - 1.0 - time.monotonic()))
            while time.monotonic() < end:
                asked = time.monotonic()
                await asyncio.wait_for(credits.acquire(), timeout=60.0)
                got = time.monotonic()
                if latest[0] != known:  # as a real actor: ask only when there is a new version
                    reply = await get(pb.GetParams(known_version=known).SerializeToString(),
                                      metadata=MD, timeout=10.0)  # fmt: skip
                    if not reply.unchanged:
                        known = reply.version
                await call.write(payload(max(known, 0)))
                if asked >= start and got < end:
                    stats.sent += 1
                    stats.waits.append(got - asked)  # type: ignore[union-attr]
        except (TimeoutError, grpc.aio.AioRpcError) as e:
            stats.failed += 1
            stats.errors.append(f"{e.code().name}: {e.details()}" if isinstance(e, grpc.aio.AioRpcError)
                                else "no credit within 60 s")  # type: ignore[union-attr]  # fmt: skip
        finally:
            reader.cancel()
            call.cancel()


def _client_process(addrs: list[str], workers: list[str], agents: int, window: tuple[float, float],
                    out: mp.Queue) -> None:  # fmt: skip
    """Actor `sim-i` sends to the learner rank i % len(addrs), as a worker of index i does."""
    from surreal.protocol.codec import encode_map
    from surreal.protocol.v1 import surreal_pb2 as pb

    os.nice(5)  # the actors stand in for other machines: the learner gets the CPU first
    tensors = encode_map(actor_fragment(agents))
    cache: dict[int, bytes] = {}

    def payload(version: int) -> bytes:  # one serialization per version, shared by the streams
        if version not in cache:
            cache[version] = pb.ExperienceRequest(
                fragment=pb.Fragment(policy_version=version, tensors=tensors)
            ).SerializeToString()
        return cache[version]

    async def main() -> list[ClientStats]:
        stats = [ClientStats(waits=[], errors=[]) for _ in workers]
        await asyncio.gather(
            *(
                _actor(addrs[int(w.rsplit("-", 1)[1]) % len(addrs)], w, payload, window, s)
                for w, s in zip(workers, stats, strict=True)
            )  # fmt: skip
        )
        return stats

    stats = asyncio.run(main())
    waits = np.array([w for s in stats for w in s.waits or []])
    errors = [e for s in stats for e in s.errors or []]
    out.put({"sent": sum(s.sent for s in stats), "failed": sum(s.failed for s in stats), "waits": waits,
             "errors": errors})  # fmt: skip


# --- one measurement ---------------------------------------------------------------------------


def measure(mode: str, streams: int, seconds: float, clients: int, learners: int = 1, pods: int = 1) -> dict:
    import psutil

    from surreal.protocol import LearnerClient

    tmp = Path(tempfile.mkdtemp(prefix="surreal-ceiling-"))
    ctx = mp.get_context("spawn")
    bridge = PodBridge(pods).__enter__() if pods > 1 else None
    if mode == "protocol":
        port = free_port()
        learner = ctx.Process(target=serve_sink, args=(port, streams), daemon=True)
        learner.start()
        pids, addr = [learner.pid], f"127.0.0.1:{port}"
    else:
        flags = {"algo": "ppo", "env": ENV_ID, "agents": streams, "steps": 10**12, "learners": learners}
        overrides = {"eval_interval": str(10**12)}
        if bridge is None:
            proc, addr = start_learner(tmp, flags, overrides)
            learner_procs = [proc]
        else:
            learner_procs, addr = start_learner_pods(tmp, flags, overrides, bridge)
        pids = [p.pid for p in learner_procs]
    try:
        addrs = addr.split(",")
        probe = LearnerClient(addrs[0], TOKEN)
        probe.wait_ready(120.0)
        now = time.monotonic()
        window = (now + START_SECONDS, now + START_SECONDS + seconds)
        out: mp.Queue = ctx.Queue()
        names = np.array_split(np.array([f"sim-{i}" for i in range(streams)]), clients)
        procs = [ctx.Process(target=_client_process, args=(addrs, list(n), streams, window, out))
                 for n in names]  # fmt: skip
        for p in procs:
            p.start()
        agents = [psutil.Process(pid) for pid in pids]  # a learner component per pod
        if learners > 1:  # the ranks are the learner components' children (the elastic agents')
            wait_ranks = time.monotonic() + 60
            while sum(len(a.children()) for a in agents) < learners and time.monotonic() < wait_ranks:
                time.sleep(0.1)
        group = [*agents, *(child for a in agents for child in a.children())]
        rss: list[tuple[float, int]] = []
        gets: list[float] = []  # seconds a Parameters.Get (the full weights) took, once a second
        while time.monotonic() < window[0]:
            time.sleep(0.05)
        before, cpu0 = _progress(probe, tmp, mode), _cpu(group)
        while time.monotonic() < window[1]:
            rss.append((time.monotonic() - window[0], sum(p.memory_info().rss for p in group)))
            asked = time.monotonic()
            probe.get_params(-1, timeout=120.0)
            gets.append(time.monotonic() - asked)
            time.sleep(max(0.0, 1.0 - gets[-1]))
        after, cpu1 = _progress(probe, tmp, mode), _cpu(group)
        results = [out.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(60)
        probe.close()
    finally:
        if mode == "protocol":
            learner.kill()
        else:
            for proc in learner_procs:
                proc.terminate()
            for proc in learner_procs:
                proc.wait(30)
        if bridge is not None:
            bridge.__exit__()
        shutil.rmtree(tmp, ignore_errors=True)
    waits = np.concatenate([r["waits"] for r in results]) if results else np.zeros(0)
    return {
        "fragments_per_s": (after["fragments"] - before["fragments"]) / seconds,
        "steps_per_s": (after["env_steps"] - before["env_steps"]) / seconds,
        "updates_per_s": (after.get("updates", 0) - before.get("updates", 0)) / seconds,
        "sent_per_s": sum(r["sent"] for r in results) / seconds,
        "failed": sum(r["failed"] for r in results),
        "errors": sorted({e for r in results for e in r["errors"]}),
        "get_p50_ms": 1e3 * float(np.percentile(gets, 50)),
        "get_max_ms": 1e3 * max(gets),
        "wait_p50_ms": 1e3 * float(np.percentile(waits, 50)) if len(waits) else float("nan"),
        "wait_p99_ms": 1e3 * float(np.percentile(waits, 99)) if len(waits) else float("nan"),
        "cpu": (cpu1 - cpu0) / seconds,
        "update_ms": _per_update(before, after, "update_seconds"),
        "collective_ms": _per_update(before, after, "collective_seconds"),
        "rss": rss,
    }


def _cpu(procs) -> float:
    """CPU seconds used so far by `procs` (the learner, and its ranks)."""
    total = 0.0
    for p in procs:
        t = p.cpu_times()
        total += t.user + t.system
    return total


def _per_update(before: dict, after: dict, key: str) -> float:
    """Milliseconds of `key` (a cumulative status figure of rank 0) per update in the window."""
    updates = after.get("updates", 0) - before.get("updates", 0)
    if key not in after or key not in before or updates <= 0:
        return float("nan")
    return 1e3 * (after[key] - before[key]) / updates


def _progress(probe, tmp: Path, mode: str) -> dict:
    """fragments, env_steps (and updates) the learner has taken so far."""
    if mode == "protocol":
        return probe.status(timeout=60.0)
    st = read_json(tmp / "status.json")
    return {"fragments": st.get("env_steps", 0) / _steps_per_fragment(tmp), **st}


def _steps_per_fragment(tmp: Path) -> int:
    from surreal.spec import load_spec_file

    cfg = load_spec_file(tmp / "spec.yaml").config
    return cfg.fragment_length * cfg.envs_per_agent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="64,256,512", help="simulated actors, comma-separated")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured window per run")
    parser.add_argument("--clients", type=int, default=2, help="processes the actors are spread over")
    parser.add_argument("--modes", default="protocol,ppo", help="protocol, ppo or both")
    parser.add_argument("--learners", default="1", help="ppo: learner ranks, comma-separated (1,2)")
    parser.add_argument("--pods", default="1", help="ppo with ranks: learner pods, comma-separated (1,2)")
    args = parser.parse_args()
    from surreal.algorithms.ppo.presets import preset_for

    print(f"{ENV_ID} fragments, {args.seconds:.0f} s windows, actors in {args.clients} processes, "
          f"{os.cpu_count()} cores", flush=True)  # fmt: skip
    runs = [(mode, 1, 1) if mode == "protocol" else (mode, int(n), pods) for mode in args.modes.split(",")
            for n in (args.learners.split(",") if mode == "ppo" else ["1"])
            for pods in sorted({min(int(p), int(n)) for p in args.pods.split(",")
                                if int(n) % min(int(p), int(n)) == 0})]  # fmt: skip
    for mode, learners, pods in runs:
        for streams in (int(s) for s in args.streams.split(",")):
            cfg = preset_for(ENV_ID, streams)
            r = measure(mode, streams, args.seconds, args.clients, learners, pods)
            half = [b for t, b in r["rss"] if t >= r["rss"][-1][0] / 2]
            name = mode if mode == "protocol" else f"ppo x{learners}" + (f" {pods} pods" if pods > 1 else "")
            print(f"({1 if mode == 'protocol' else 2}) {name:16s} M={streams:<4d} fragment "
                  f"{cfg.fragment_length}x{cfg.envs_per_agent}: {r['fragments_per_s']:8,.0f} fragments/s "
                  f"{r['steps_per_s']:9,.0f} env steps/s  {r['updates_per_s']:5.2f} updates/s  "
                  f"credit wait p50 {r['wait_p50_ms']:7.1f} ms p99 {r['wait_p99_ms']:7.1f} ms  "
                  f"failed {r['failed']}  learner CPU {r['cpu']:.0%}", flush=True)  # fmt: skip
            print(f"    learner RSS {rss_line(r['rss'])}; second half {min(half) / 2**20:.1f}.."
                  f"{max(half) / 2**20:.1f} MiB; Parameters.Get under this load p50 "
                  f"{r['get_p50_ms']:.0f} ms, max {r['get_max_ms']:.0f} ms", flush=True)  # fmt: skip
            if mode == "ppo" and learners > 1:
                share = r["collective_ms"] / r["update_ms"] if r["update_ms"] > 0 else float("nan")
                print(f"    per update (rank 0): {r['update_ms']:.0f} ms, of which collectives "
                      f"{r['collective_ms']:.0f} ms ({share:.0%})", flush=True)  # fmt: skip
            elif mode == "ppo":
                print(f"    per update: {r['update_ms']:.0f} ms", flush=True)
            if r["errors"]:
                print(f"    failed calls said: {'; '.join(r['errors'][:5])}", flush=True)


if __name__ == "__main__":
    main()

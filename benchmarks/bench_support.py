"""What the benchmarks share: a real learner component in its own process, its RSS over time, and
a whole `surreal create` in the foreground sampled through its status.json."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

TOKEN = "bench-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def foreground_create(args: list[str], steps: int, target: float | None = None) -> dict[str, Any]:
    """`surreal create bench --steps STEPS ARGS` in the foreground in a home of its own, its
    learner's status.json sampled. `rate`: env steps/s between 10 % of the steps and the last
    sample before the end (start-up and the final evaluation left out), each sample timed by the
    learner's own `elapsed_seconds` when it wrote the file (about once a second); `wall_rate`
    includes them. `to_target_s` and `to_target_steps`: when the evaluation first reached
    `target` (None: never). `sizing`: the spec's section. `update_share` and `actor_wait_share`:
    the learner's and its actors' over the end of training, as status says them. Create measures its
    packing unless ARGS say --no-calibrate (SURREAL_NO_CALIBRATE is dropped from the environment)."""
    home = Path(tempfile.mkdtemp(prefix="surreal-bench-"))
    exe = shutil.which("surreal", path=str(Path(sys.executable).parent)) or shutil.which("surreal")
    if exe is None:
        sys.exit("the surreal command is not installed (make install)")
    environ = {k: v for k, v in os.environ.items() if k != "SURREAL_NO_CALIBRATE"}
    status_file = home / "experiments" / "bench" / "status.json"
    samples: list[tuple[float, int]] = []
    reached: tuple[float, int] | None = None
    try:
        start = time.perf_counter()
        proc = subprocess.Popen([exe, "create", "bench", "--steps", str(steps), *args],
                                env={**environ, "SURREAL_HOME": str(home)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
        while proc.poll() is None:
            time.sleep(0.25)
            status = read_json(status_file)
            if "env_steps" not in status or (samples and samples[-1][0] == status["elapsed_seconds"]):
                continue  # not written yet, or not since the last look (it is written about once a second)
            samples.append((float(status["elapsed_seconds"]), int(status["env_steps"])))
            ret = status.get("eval_return")
            if reached is None and target is not None and ret is not None and ret >= target:
                reached = (float(status["elapsed_seconds"]), int(status["env_steps"]))
        wall = time.perf_counter() - start
        err = proc.stderr.read() if proc.stderr else ""
        if proc.returncode != 0:
            sys.exit(f"surreal create {' '.join(args)} failed with exit code {proc.returncode}: {err[-500:]}")
        final = read_json(status_file)
        spec = yaml.safe_load((home / "experiments" / "bench" / "spec.yaml").read_text())
        sizing = spec.get("sizing") or {}
    finally:
        shutil.rmtree(home, ignore_errors=True)
    window = [(t, s) for t, s in samples if steps * 0.1 <= s < steps] or samples
    if len(window) < 2:  # over before two samples: the learner's own rate over the whole run
        window = [(0.0, 0), (float(final["elapsed_seconds"]), int(final["env_steps"]))]
    (t0, s0), (t1, s1) = window[0], window[-1]
    return {
        "rate": (s1 - s0) / max(t1 - t0, 1e-9),
        "wall_rate": final["env_steps"] / wall,
        "eval_return": final.get("eval_return"),
        "to_target_s": reached[0] if reached else None,
        "to_target_steps": reached[1] if reached else None,
        "sizing": sizing,
        "update_share": final.get("update_share"),
        "actor_wait_share": final.get("actor_wait_share"),
    }


def start_learner(tmp: Path, flags: dict[str, Any], overrides: dict[str, str] | None = None,
                  ) -> tuple[subprocess.Popen[bytes], str]:  # fmt: skip
    """`surreal component learner` for the spec of `flags` (as `surreal create` would build it),
    on free ports of 127.0.0.1 (one per learner rank: `flags["learners"]`), files in `tmp`; its
    address (the ranks', comma-separated)."""
    ports: list[int] = []
    while len(ports) < int(flags.get("learners", 1)):
        port = free_port()
        ports.append(port) if port not in ports else None
    addr = ",".join(f"127.0.0.1:{p}" for p in ports)
    argv = write_spec(tmp, flags, overrides)
    log = (tmp / "learner.log").open("wb")
    return subprocess.Popen(argv, env=learner_env(addr, tmp), stdout=log, stderr=subprocess.STDOUT), addr


def write_spec(tmp: Path, flags: dict[str, Any], overrides: dict[str, str] | None) -> list[str]:
    """tmp/spec.yaml for `flags` (as `surreal create` builds it); the learner component's argv."""
    from surreal.spec import build_spec

    (tmp / "spec.yaml").write_text(build_spec("bench", flags=flags, overrides=overrides).to_yaml())
    return [sys.executable, "-m", "surreal", "component", "learner", "--spec", str(tmp / "spec.yaml")]


def learner_env(addr: str, exp_dir: Path, **more: str) -> dict[str, str]:
    """A learner component's environment: every rank's address, the token, its files."""
    own = {"SURREAL_LEARNER_ADDR": addr, "SURREAL_TOKEN": TOKEN, "SURREAL_EXP_DIR": str(exp_dir)}
    return {**os.environ, **own, **more}


def rss_line(rss: list[tuple[float, int]]) -> str:
    """RSS at a quarter, half, three quarters and the end of the samples (time, bytes)."""
    marks = [rss[min(len(rss) - 1, round(q * (len(rss) - 1)))] for q in (0.25, 0.5, 0.75, 1.0)]
    return "  ".join(f"t={t:4.0f}s {b / 2**20:6.1f} MiB" for t, b in marks)


class PodBridge:
    """`pods` stand-in pods on this machine, as pods of one node are wired: each a network
    namespace with a veth pair to a bridge in this namespace, which has an address on it too (so
    processes here reach every pod, as actors of other nodes would through the pod network).
    Addresses are 10.232.X.2.. of a random X (only ones this makes); everything is deleted on exit,
    the processes started in the pods killed first. Needs root and iproute2's `ip`."""

    def __init__(self, pods: int) -> None:
        import secrets
        import shutil

        self.ip = shutil.which("ip") or "/usr/sbin/ip"
        tag, subnet = secrets.token_hex(3), secrets.randbelow(250)
        self.bridge = f"srb{tag}"
        self.host_addr = f"10.232.{subnet}.1"
        self.ns = [f"srp{p}-{tag}" for p in range(pods)]
        self.dev = [(f"srh{p}{tag}", f"srv{p}{tag}") for p in range(pods)]
        self.addr = [f"10.232.{subnet}.{p + 2}" for p in range(pods)]
        self.procs: list[subprocess.Popen[bytes]] = []

    def _run(self, *args: str) -> None:
        subprocess.run([self.ip, *args], check=True, capture_output=True, timeout=30)

    def __enter__(self) -> PodBridge:
        try:
            self._run("link", "add", self.bridge, "type", "bridge")
            self._run("addr", "add", f"{self.host_addr}/24", "dev", self.bridge)
            self._run("link", "set", self.bridge, "up")
            for ns, (host_end, pod_end), addr in zip(self.ns, self.dev, self.addr, strict=True):
                self._run("netns", "add", ns)
                self._run("-n", ns, "link", "set", "lo", "up")
                self._run("link", "add", host_end, "type", "veth", "peer", "name", pod_end)
                self._run("link", "set", pod_end, "netns", ns)
                self._run("link", "set", host_end, "master", self.bridge)
                self._run("link", "set", host_end, "up")
                self._run("-n", ns, "addr", "add", f"{addr}/24", "dev", pod_end)
                self._run("-n", ns, "link", "set", pod_end, "up")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
        for ns in self.ns:  # deleting a namespace deletes the veth pair whose end is inside it
            subprocess.run([self.ip, "netns", "del", ns], capture_output=True, timeout=30)
        subprocess.run([self.ip, "link", "del", self.bridge], capture_output=True, timeout=30)

    def start(self, pod: int, argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
        """`argv` inside pod `pod` (`ip netns exec` execs it: the process is argv's), output to `log`."""
        proc = subprocess.Popen([self.ip, "netns", "exec", self.ns[pod], *argv], env=env,
                                stdout=log.open("wb"), stderr=subprocess.STDOUT)  # fmt: skip
        self.procs.append(proc)
        return proc


def start_learner_pods(tmp: Path, flags: dict[str, Any], overrides: dict[str, str] | None,
                       bridge: PodBridge) -> tuple[list[subprocess.Popen[bytes]], str]:  # fmt: skip
    """The learner as `flags["learner_pods"]` pods of the bridge, as the containers and kube
    backends run it: each pod a `surreal component learner` of learners / pods ranks on ports
    6000.. of its address, pod 0 serving the ranks' control store; pod 0's files in `tmp`, pod p's
    in tmp/pod<p>. The processes, pod by pod, and the address of every rank."""
    from surreal.orchestrator.kube.render import RANKS_CONTROL_PORT
    from surreal.orchestrator.program import LEARNER_PORT, rank_addrs
    from surreal.runtime.run import ENV_CONTROL, ENV_POD, ENV_PODS

    pods = len(bridge.addr)
    local = int(flags["learners"]) // pods
    addr = ",".join(rank_addrs(host, LEARNER_PORT, local) for host in bridge.addr)
    # Learner pods are not the local backend's: the spec says containers, as those pods run it.
    argv = write_spec(tmp, {**flags, "learner_pods": pods, "backend": "containers"}, overrides)
    procs = []
    for pod in range(pods):
        exp_dir = tmp if pod == 0 else tmp / f"pod{pod}"
        exp_dir.mkdir(exist_ok=True)
        env = learner_env(
            addr,
            exp_dir,
            SURREAL_BIND_HOST="0.0.0.0",
            **{ENV_PODS: str(pods), ENV_POD: str(pod), ENV_CONTROL: f"{bridge.addr[0]}:{RANKS_CONTROL_PORT}"},
        )
        procs.append(bridge.start(pod, argv, env, exp_dir / "learner.log"))
    return procs, addr

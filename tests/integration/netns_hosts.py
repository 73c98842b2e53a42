"""Two test hosts on this machine: network namespaces joined by a veth pair (iproute2's `ip`).

Only addresses this harness creates are used (10.231.X.1 and .2 in a /30 of a random X), every
namespace is deleted on exit, and the processes started in them are killed first. Needs root (or
CAP_NET_ADMIN) and `ip`; `available()` says whether both are there.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

IP = shutil.which("ip") or "/usr/sbin/ip"


def _ip(*args: str) -> None:
    subprocess.run([IP, *args], check=True, capture_output=True, timeout=30)


def available() -> str | None:
    """None if namespaces can be made here, else why not."""
    if not os.path.exists(IP):
        return "iproute2's `ip` is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"srprobe-{secrets.token_hex(3)}"
    try:
        _ip("netns", "add", probe)
    except subprocess.CalledProcessError as e:
        return f"`ip netns add` failed: {e.stderr.decode().strip()}"
    _ip("netns", "del", probe)
    return None


class Hosts:
    """Hosts "learner" and "actor", each a namespace with one end of a veth pair."""

    def __init__(self) -> None:
        tag = secrets.token_hex(3)
        subnet = 4 * secrets.randbelow(64)
        self.ns = {"learner": f"srl-{tag}", "actor": f"sra-{tag}"}
        self.dev = {"learner": f"srl{tag}", "actor": f"sra{tag}"}
        self.addr = {"learner": f"10.231.{subnet}.1", "actor": f"10.231.{subnet}.2"}
        self._procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Hosts:
        try:
            for host in ("learner", "actor"):
                _ip("netns", "add", self.ns[host])
                _ip("-n", self.ns[host], "link", "set", "lo", "up")
            _ip("link", "add", self.dev["learner"], "type", "veth", "peer", "name", self.dev["actor"])
            for host in ("learner", "actor"):
                _ip("link", "set", self.dev[host], "netns", self.ns[host])
                _ip("-n", self.ns[host], "addr", "add", f"{self.addr[host]}/30", "dev", self.dev[host])
                _ip("-n", self.ns[host], "link", "set", self.dev[host], "up")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self._procs:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        for ns in self.ns.values():  # deleting a namespace deletes the veth end inside it
            subprocess.run([IP, "netns", "del", ns], capture_output=True, timeout=30)

    def cut(self, host: str) -> None:
        """Take `host`'s end of the link down: the other end loses its carrier, and what it sends
        is dropped without an error, as on a cable cut or a vanished node."""
        _ip("-n", self.ns[host], "link", "set", self.dev[host], "down")

    def mend(self, host: str) -> None:
        _ip("-n", self.ns[host], "link", "set", self.dev[host], "up")

    def start(
        self, host: str, argv: Sequence[str], env: Mapping[str, str], log: Path
    ) -> subprocess.Popen[bytes]:
        """Run `argv` inside `host` with output appended to `log`; killed on exit."""
        proc = subprocess.Popen([IP, "netns", "exec", self.ns[host], *argv], env=dict(env),
                                stdout=log.open("ab"), stderr=subprocess.STDOUT)  # fmt: skip
        self._procs.append(proc)
        return proc

"""`surreal plot --backend kube`: the learner's event files copied out of its pod as `kubectl cp`
does (`tar cf -` in the container). The exec is a function here that runs the same tar on a folder
standing for the pod's volume; the rest goes through the in-memory API server."""

from __future__ import annotations

import base64
import hashlib
import socket
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import matplotlib.image
import pytest
from click.testing import CliRunner
from fake_api import FakeApi, fake_client
from kube_support import make_spec
from kubernetes import client

from surreal.cli.commands import cli
from surreal.orchestrator import plot
from surreal.orchestrator.kube.client import ExperimentNotFound, KubeClient, KubeError
from surreal.orchestrator.kube.exec import Exec, check_status, pod_exec
from surreal.orchestrator.kube.pods import EXP_DIR
from surreal.runtime.tb import Scalars

TAR = ["tar", "cf", "-", "-C", EXP_DIR, "tb"]


def learner_pod(ready: bool = True) -> dict:
    state = {"running": {}} if ready else {"waiting": {"reason": "ContainerCreating"}}
    labels = {"app.kubernetes.io/name": "surreal", "surreal.io/experiment": "exp1",
              "surreal.io/component": "learner"}  # fmt: skip
    status = {
        "name": "learner",
        "ready": ready,
        "restartCount": 0,
        "image": "i",
        "imageID": "",
        "state": state,
    }
    return {"metadata": {"name": "exp1-learner-0", "namespace": "default", "labels": labels},
            "status": {"phase": "Running", "containerStatuses": [status]}}  # fmt: skip


def exec_on(volume: Path, calls: list) -> Exec:
    """The pod's exec, with `volume` mounted where the learner's experiment dir is."""

    def run(pod: str, namespace: str, container: str, argv: Sequence[str]) -> bytes:
        calls.append((pod, namespace, container, list(argv)))
        done = subprocess.run([str(volume) if a == EXP_DIR else a for a in argv], capture_output=True)
        status = b'{"status": "Success"}' if done.returncode == 0 else b'{"status": "Failure"}'
        check_status(status, done.stderr, argv, pod)
        return done.stdout

    return run


@pytest.fixture
def volume(tmp_path: Path) -> Path:
    scalars = Scalars(tmp_path / "volume" / "tb")
    for step, value in [(100, 10.0), (200, 30.0), (300, 45.5)]:
        scalars.add("progress", {"episode_return": value}, step)
    scalars.add("eval", {"mean_return": 50.0}, 300)
    scalars.close()
    return tmp_path / "volume"


@pytest.fixture
def cluster(volume: Path) -> tuple[FakeApi, KubeClient, list]:
    api, calls = FakeApi(), []
    launcher = KubeClient(fake_client(api), context="kind-surreal", exec_=exec_on(volume, calls))
    launcher.create(make_spec(), token="tok")
    return api, launcher, calls


def test_the_archive_is_the_learner_tb_folder(cluster, volume: Path) -> None:
    api, launcher, calls = cluster
    api.add("pods", learner_pod())
    archive = launcher.tb_archive("exp1", "default")
    assert calls == [("exp1-learner-0", "default", "learner", TAR)]
    run = plot.read_archive(archive, "exp1")
    assert run == plot.read_events(volume / "tb", "exp1")
    assert list(zip(run.train.steps, run.train.values, strict=True)) == [
        (100, 10.0),
        (200, 30.0),
        (300, 45.5),
    ]


def test_a_finished_runs_events_are_read_where_tensorboard_mounts_the_claim(cluster, volume: Path) -> None:
    api, launcher, calls = cluster
    tensorboard = learner_pod()
    tensorboard["metadata"].update(name="exp1-tensorboard-abc")
    tensorboard["metadata"]["labels"]["surreal.io/component"] = "tensorboard"
    tensorboard["status"]["containerStatuses"][0]["name"] = "tensorboard"
    api.add("pods", tensorboard)
    api.add("pods", learner_pod(ready=False))  # the learner's pod has ended
    run = plot.read_archive(launcher.tb_archive("exp1", "default"), "exp1")
    assert calls == [("exp1-tensorboard-abc", "default", "tensorboard", TAR)]
    assert run == plot.read_events(volume / "tb", "exp1")


def test_no_experiment_no_ready_learner_or_a_failed_tar_is_a_kube_error(cluster, volume: Path) -> None:
    api, launcher, calls = cluster
    with pytest.raises(ExperimentNotFound, match="no experiment 'nope' in namespace 'default'"):
        launcher.tb_archive("nope", "default")
    api.add("pods", learner_pod(ready=False))
    with pytest.raises(KubeError, match="neither its learner nor its TensorBoard pod is ready"):
        launcher.tb_archive("exp1", "default")
    assert calls == []
    api.add("pods", learner_pod())
    (volume / "tb").rename(volume / "elsewhere")
    with pytest.raises(
        KubeError, match=r"`tar cf - -C /var/lib/surreal tb` in pod 'exp1-learner-0' failed: tar: "
    ):
        launcher.tb_archive("exp1", "default")


def test_the_exec_status_channel_decides() -> None:
    check_status(b'{"metadata": {}, "status": "Success"}', b"noise", ["true"], "p")
    failure = b'{"status": "Failure", "message": "command terminated with non-zero exit code: 2"}'
    with pytest.raises(KubeError, match="`tar cf -` in pod 'p' failed: tar: tb: Cannot stat$"):
        check_status(failure, b"tar: warning\ntar: tb: Cannot stat\n", ["tar", "cf", "-"], "p")
    with pytest.raises(KubeError, match="failed: command terminated with non-zero exit code: 2$"):
        check_status(failure, b"", ["tar"], "p")
    with pytest.raises(KubeError, match="failed: no exit status$"):
        check_status(b"", b"", ["tar"], "p")


def test_the_command_draws_a_kube_experiment(cluster, tmp_path: Path, monkeypatch) -> None:
    api, launcher, _ = cluster
    monkeypatch.setattr(
        KubeClient, "connect", classmethod(lambda cls, context=None, kubeconfig=None: launcher)
    )
    out = tmp_path / "k.png"
    result = CliRunner().invoke(cli, ["plot", "exp1", "--backend", "kube", "-o", str(out), "--x", "steps"])
    assert result.exit_code == 1 and not out.exists()
    assert (
        result.stderr.strip()
        == "surreal: error: experiment 'exp1': neither its learner nor its TensorBoard pod is ready to "
        "read the events from"
    )
    api.add("pods", learner_pod())
    result = CliRunner().invoke(cli, ["plot", "exp1", "--backend", "kube", "-o", str(out), "--x", "steps"])
    assert result.exit_code == 0, result.output
    assert matplotlib.image.imread(out).shape[:2] == plot.PANEL_SIZE[::-1]


# --- the exec call itself, against a websocket that speaks the API server's exec protocol ------


def ws_frame(payload: bytes, opcode: int = 2) -> bytes:
    """One unmasked websocket frame of at most 64 KiB, as a server sends it (RFC 6455 5.2)."""
    size = bytes([len(payload)]) if len(payload) < 126 else bytes([126]) + len(payload).to_bytes(2, "big")
    return bytes([0x80 | opcode]) + size + payload


WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455: the handshake's fixed key suffix
CLOSE = ws_frame(b"\x03\xe8", opcode=8)  # close, 1000 normal


class ExecEndpoint:
    """pods/exec on one connection: answers the upgrade with v5.channel.k8s.io, sends stdout in
    16 KiB frames on channel 1, stderr on 2, a Status on 3, then closes."""

    def __init__(self, stdout: bytes, stderr: bytes, status: bytes | None) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.path = ""
        self.frames = [ws_frame(bytes([1]) + stdout[i : i + 16384]) for i in range(0, len(stdout), 16384)]
        self.frames += [ws_frame(bytes([2]) + stderr)] if stderr else []
        self.ends = status is not None  # False: the command never ends
        if status is not None:
            self.frames += [ws_frame(bytes([3]) + status), CLOSE]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn, self.listener:
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(4096)
            lines = head.decode().split("\r\n")
            self.path = lines[0].split()[1]
            key = next(
                line.split(":", 1)[1].strip()
                for line in lines
                if line.lower().startswith("sec-websocket-key")
            )
            accept = base64.b64encode(hashlib.sha1(f"{key}{WS_GUID}".encode()).digest()).decode()
            upgrade = [
                "HTTP/1.1 101 Switching Protocols",
                "Upgrade: websocket",
                "Connection: Upgrade",
                f"Sec-WebSocket-Accept: {accept}",
                "Sec-WebSocket-Protocol: v5.channel.k8s.io",
            ]
            conn.sendall(("\r\n".join(upgrade) + "\r\n\r\n").encode())
            conn.sendall(b"".join(self.frames))
            conn.settimeout(10)
            while conn.recv(4096):  # the client's close frame (answered if it came first), then EOF
                if not self.ends:
                    conn.sendall(CLOSE)
                    self.ends = True


def core_at(port: int) -> client.CoreV1Api:
    return client.CoreV1Api(client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{port}")))


def test_exec_returns_stdout_byte_for_byte_over_many_frames() -> None:
    archive = bytes(range(256)) * 800  # 200 KiB, not UTF-8: a text-mode stream would mangle it
    endpoint = ExecEndpoint(archive, b"tar: removing leading /", b'{"metadata": {}, "status": "Success"}')
    out = pod_exec(core_at(endpoint.port), timeout=10)("exp1-learner-0", "rl", "learner", TAR)
    assert out == archive
    url = urlparse(endpoint.path)
    assert url.path == "/api/v1/namespaces/rl/pods/exp1-learner-0/exec"
    query = parse_qs(url.query)
    assert query["command"] == TAR and query["container"] == ["learner"]
    assert query["stdout"] == query["stderr"] == ["true"] and query["stdin"] == query["tty"] == ["false"]


def test_exec_failure_is_the_commands_last_stderr_line() -> None:
    status = b'{"status": "Failure", "reason": "NonZeroExitCode", "message": "exit code 2"}'
    endpoint = ExecEndpoint(b"", b"tar: tb: Cannot stat: No such file or directory\n", status)
    with pytest.raises(
        KubeError, match="in pod 'p' failed: tar: tb: Cannot stat: No such file or directory$"
    ):
        pod_exec(core_at(endpoint.port), timeout=10)("p", "default", "learner", TAR)


def test_exec_that_does_not_finish_in_time_is_a_kube_error() -> None:
    endpoint = ExecEndpoint(b"partial", b"", None)
    with pytest.raises(KubeError, match="`tar` in pod 'p' did not finish in 0.5 s"):
        pod_exec(core_at(endpoint.port), timeout=0.5)("p", "default", "learner", TAR)

"""What the CLI tests of names and files share: a home with finished experiments, a snapshot of a
tree byte for byte, and the installed command's entry point run in-process."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from surreal.cli import main
from surreal.orchestrator.home import SPEC_FILE, STATUS_FILE
from surreal.spec import build_spec

# A finished local experiment's files, as the supervisor and the learner leave them.
STATE = {
    "phase": "Succeeded",
    "supervisor_pid": None,
    "components": [{"name": "learner", "role": "learner", "state": "Succeeded", "restarts": 0}],
}
METRICS = {"env_steps": 1000, "updates": 3, "policy_version": 3, "eval_return": 42.0}


def make_experiment(home: Path, name: str) -> Path:
    exp_dir = home / "experiments" / name
    (exp_dir / "logs").mkdir(parents=True)
    (exp_dir / "checkpoints").mkdir()
    (exp_dir / SPEC_FILE).write_text(spec_text(name))
    (exp_dir / "state.json").write_text(json.dumps(STATE))
    (exp_dir / STATUS_FILE).write_text(json.dumps(METRICS))
    (exp_dir / "logs" / "learner.log").write_text("learner line 1\nlearner line 2\n")
    (exp_dir / "checkpoints" / "ckpt-3.pt").write_bytes(os.urandom(256))
    return exp_dir


SPECS: dict[str, str] = {}


def spec_text(name: str) -> str:
    if name not in SPECS:
        SPECS[name] = build_spec(name, flags={"algo": "ppo", "steps": 1000}).to_yaml()
    return SPECS[name]


HOSTILE = ["..", "../..", ".", "./alpha", "alpha/..", "alpha/../beta", "a/b", "/etc", "/", "~", "",
           "-", "Alpha", "al\x00pha", "alpha\n", " alpha", "x" * 300]  # fmt: skip


def snapshot(root: Path) -> Snapshot:
    """Every entry under `root` (never through a symbolic link, never reading a FIFO): its kind,
    bytes or link target, and mode."""
    out: Snapshot = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path), st.st_mode)
            elif stat.S_ISDIR(st.st_mode) or stat.S_ISFIFO(st.st_mode):  # a FIFO is never read
                out[rel] = ("dir" if stat.S_ISDIR(st.st_mode) else "fifo", b"", st.st_mode)
            else:
                out[rel] = ("file", path.read_bytes(), st.st_mode)
    return out


Snapshot = dict[str, tuple[str, bytes | str, int]]


def without(snap: Snapshot, prefix: str) -> Snapshot:
    """`snap` less `prefix` and everything under it."""
    return {k: v for k, v in snap.items() if k != prefix and not k.startswith(prefix + os.sep)}


def surreal(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run the installed command's entry point; (exit code, stdout, stderr)."""
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]

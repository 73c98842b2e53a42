"""Nothing a user types can lose data: hostile names on every command, corrupt or missing files,
delete of what is not an experiment. Each command runs in-process through `surreal.cli.main`, the
installed command's entry point, so what a user sees is what is asserted: the exit code, one line
on stderr, no traceback, and every byte outside the named experiment as it was."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from cli_world import HOSTILE, STATE, make_experiment, one_line, snapshot, spec_text, surreal, without

from surreal.orchestrator.home import SPEC_FILE
from surreal.orchestrator.local import experiment as exps
from surreal.spec import build_spec


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$SURREAL_HOME with two experiments (alpha, beta), a file of the user's beside them, a
    folder outside the home and a symbolic link in the experiments folder that points to it."""
    home = tmp_path / "home"
    make_experiment(home, "alpha")
    make_experiment(home, "beta")
    (home / "notes.txt").write_text("the user's own file\n")
    outside = tmp_path / "outside"
    (outside / "logs").mkdir(parents=True)
    (outside / SPEC_FILE).write_text(spec_text("linked"))
    (outside / "precious.bin").write_bytes(os.urandom(64))
    (home / "experiments" / "linked").symlink_to(outside, target_is_directory=True)
    monkeypatch.setenv("SURREAL_HOME", str(home))
    monkeypatch.delenv("SURREAL_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


COMMANDS: list[list[str]] = [
    ["status", "{}"],
    ["status", "{}", "-o", "json"],
    ["delete", "{}"],
    ["logs", "{}"],
    ["logs", "{}", "learner"],
    ["scale", "{}", "--agents", "3"],
    ["tensorboard", "{}", "--port", "1"],
    ["plot", "{}", "-o", "curve.png"],
    ["create", "{}", "--algo", "ppo", "--dry-run"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0] + ("-" + c[-1] if len(c) > 2 else ""))
def test_hostile_names_touch_nothing(
    world: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """Every command with every hostile name: exit 2 and one line naming the name (a symbolic
    link in the experiments folder passes the rule but is refused as not an experiment: exit 1),
    and not one byte changes anywhere (the home, the folder outside it, the working directory)."""
    before = snapshot(world)
    for name in [*HOSTILE, "linked"]:
        args = [a.replace("{}", name) for a in command]
        code, _, err = surreal(capsys, *args)
        if name == "linked" and command[0] == "create":  # a valid name, but taken: as create refuses it
            assert code == 2 and "already exists" in one_line(err), err
        elif name == "linked":
            assert code == 1, (args, err)
            assert "symbolic link" in one_line(err), err
        else:
            assert code == 2, (args, err)
            one_line(err)
        assert snapshot(world) == before, f"{args} changed files"


def test_delete_removes_exactly_the_experiment(world: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(world)
    code, out, err = surreal(capsys, "delete", "alpha")
    assert (code, err) == (0, ""), err
    assert "deleted" in out
    assert snapshot(world) == without(before, os.path.join("home", "experiments", "alpha"))


def test_delete_of_a_folder_that_is_no_experiment_is_refused(
    world: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stray = world / "home" / "experiments" / "photos"
    stray.mkdir()
    (stray / "cat.jpg").write_bytes(b"\xff\xd8not really")
    before = snapshot(world)
    code, _, err = surreal(capsys, "delete", "photos")
    assert code == 1
    assert "holds none of the files of an experiment" in one_line(err)
    assert snapshot(world) == before


def test_a_symlink_inside_an_experiment_is_removed_not_followed(
    world: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (world / "home" / "experiments" / "alpha" / "data").symlink_to(
        world / "outside", target_is_directory=True
    )
    outside = snapshot(world / "outside")
    code, _, err = surreal(capsys, "delete", "alpha")
    assert code == 0, err
    assert not (world / "home" / "experiments" / "alpha").exists()
    assert snapshot(world / "outside") == outside


# --- corrupt and missing files ------------------------------------------------------------------

CORRUPTIONS = {
    "truncated state.json": ("state.json", b'{"phase": "Succ'),
    "empty state.json": ("state.json", b""),
    "state.json a list": ("state.json", b"[1, 2]"),
    "truncated status.json": ("status.json", b'{"env_steps": 10'),
    "binary spec.yaml": ("spec.yaml", bytes(range(256))),
    "spec.yaml not a mapping": ("spec.yaml", b"- just\n- a list\n"),
    "spec.yaml without algo": ("spec.yaml", b"name: alpha\nenv: CartPole-v1\n"),
    "missing spec.yaml": ("spec.yaml", None),
}


@pytest.mark.parametrize("case", CORRUPTIONS, ids=list(CORRUPTIONS))
def test_a_corrupt_file_is_named_in_one_line_everywhere(
    world: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    """status names the file and its problem (exit 1); list shows the row with its problem and
    every other row as it is; delete removes the experiment all the same and nothing else."""
    file, content = CORRUPTIONS[case]
    path = world / "home" / "experiments" / "alpha" / file
    if content is None:
        path.unlink()
    else:
        path.write_bytes(content)

    code, _, err = surreal(capsys, "status", "alpha")
    line = one_line(err)
    assert code == 1
    assert str(path) in line, line

    code, out, err = surreal(capsys, "list", "-o", "json")
    assert (code, err) == (0, "")
    rows = {r["name"]: r for r in json.loads(out)}
    assert str(path) in rows["alpha"]["problem"]
    assert rows["alpha"]["phase"] == "Unknown"
    assert rows["beta"]["phase"] == "Succeeded" and "problem" not in rows["beta"]
    assert "symbolic link" in rows["linked"]["problem"]

    code, out, err = surreal(capsys, "list")
    assert code == 0
    assert f"alpha: {path}" in out  # the table's rows, then what is wrong with the unreadable ones

    before = snapshot(world)
    code, _, err = surreal(capsys, "delete", "alpha")
    assert (code, err) == (0, ""), err
    assert snapshot(world) == without(before, os.path.join("home", "experiments", "alpha"))


def test_config_file_that_is_binary_is_one_line(world: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = world / "config.yaml"
    config.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    code, _, err = surreal(capsys, "create", "gamma", "--algo", "ppo", "--config", str(config))
    assert code == 2
    assert "is not UTF-8 text" in one_line(err) and str(config) in err
    assert not (world / "home" / "experiments" / "gamma").exists()


def _tree(path: Path) -> Iterator[Path]:
    for dirpath, _dirnames, filenames in os.walk(path):
        yield Path(dirpath)
        for f in filenames:
            yield Path(dirpath) / f


def test_delete_of_a_read_only_experiment_works_for_its_owner() -> None:
    """A user who made their experiment read-only (chmod -R a-w) can still delete it. Root ignores
    the permission bits, so under root the delete runs in a child that is the unprivileged owner of
    the tree (in a folder of /tmp that user can reach: pytest's own are private to root)."""
    top = Path(tempfile.mkdtemp(prefix="surreal-ro-", dir="/tmp"))
    try:
        home = top / "home"
        exp_dir = make_experiment(home, "alpha")
        make_experiment(home, "beta")
        uid = os.getuid()
        if uid == 0:
            uid = 65534  # nobody: owns the tree and runs the delete
            for p in [top, *top.rglob("*")]:
                os.lchown(p, uid, uid)
        os.chmod(top, 0o755)
        for p in sorted(_tree(exp_dir), key=lambda p: -len(p.parts)):
            os.chmod(p, 0o555 if p.is_dir() else 0o444)
        sibling = snapshot(home / "experiments" / "beta")
        pid = os.fork()
        if pid == 0:  # the child: the owner, not root; only modules already imported are used
            code = 1
            try:
                if os.getuid() == 0:
                    os.setgid(uid)
                    os.setuid(uid)
                exps.delete(home, "alpha")
                code = 0
            except BaseException as exc:  # noqa: BLE001 - reported through the exit code
                sys.stderr.write(f"delete failed: {exc!r}\n")
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert not exp_dir.exists()
        assert snapshot(home / "experiments" / "beta") == sibling
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_scale_is_checked_as_create_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """A scale that would pack more agents into a local actor process than the protocol's message
    limit carries is refused as create refuses it (exit 2, the same line), and nothing is written;
    the agent bound is create's too."""
    home = tmp_path / "home"
    monkeypatch.setenv("SURREAL_HOME", str(home))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    # 10 envs x 100,001 rows: 34 MB from one agent, 68 MB (over 64 MiB) from a process of two
    sets = {"fragment_length": "100000", "steps_per_update": "4000000", "envs_per_agent": "10"}
    fat = [x for k, v in sets.items() for x in ("--set", f"{k}={v}")]
    code, _, err = surreal(capsys, "create", "big", "--algo", "ppo", "--agents", "4", "--steps", "5000000",
                           "--dry-run", *fat)  # fmt: skip
    assert code == 2
    refusal = one_line(err).split("fragments of ")[1]
    exp_dir = make_experiment(home, "big")
    spec = build_spec("big", flags={"algo": "ppo", "agents": 2, "steps": 5_000_000}, overrides=sets)
    (exp_dir / SPEC_FILE).write_text(spec.to_yaml())
    running = {**STATE, "phase": "Running", "supervisor_pid": os.getpid(),
               "supervisor_create_time": psutil.Process().create_time()}  # fmt: skip
    (exp_dir / "state.json").write_text(json.dumps(running))
    before = snapshot(tmp_path)
    code, _, err = surreal(capsys, "scale", "big", "--agents", "4")
    assert code == 2
    assert refusal in one_line(err)
    code, _, err = surreal(capsys, "scale", "big", "--agents", "1000001")
    assert code == 2
    assert "--agents must be an integer from 1 to 1,000,000" in one_line(err)
    assert snapshot(tmp_path) == before

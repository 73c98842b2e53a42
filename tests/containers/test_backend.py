"""`--backend containers` as a user runs it: the installed `surreal` creates, watches, scales and
deletes an experiment whose rendered objects run as real containers; bad input is one line and
leaves nothing behind."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import held_containers

from surreal.orchestrator.containers.run import Engine
from surreal.orchestrator.launcher import wait_until

SURREAL = str(Path(sys.executable).parent / "surreal")
pytestmark = pytest.mark.slow


class Cli:
    def __init__(self, home: Path, engine: Engine) -> None:
        self.home = home
        self.engine = engine
        self.env = {**os.environ, "SURREAL_HOME": str(home)}

    def run(self, *args: str, timeout: float = 120.0, ok: bool = True, env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess[str]:  # fmt: skip
        proc = subprocess.run([SURREAL, *args], env=env or self.env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)  # fmt: skip
        if ok:
            assert proc.returncode == 0, f"surreal {' '.join(args)}: {proc.returncode}\n{proc.stderr}"
        return proc

    def status(self, name: str) -> dict[str, Any]:
        return dict(json.loads(self.run("status", name, "-o", "json").stdout))

    def containers(self, name: str) -> list[str]:
        """Containers of experiment `name` on this machine, running or not."""
        out = self.engine(
            "ps", "-a", "--filter", f"label=surreal.io/experiment={name}", "--format", "{{.Names}}"
        )
        return out.split()

    def running(self, name: str, role: str) -> list[str]:
        """The running containers of `name`'s `role`."""
        out = self.engine(
            "ps",
            "--filter",
            f"label=surreal.io/experiment={name}",
            "--filter",
            f"label=surreal.io/component={role}",
            "--format",
            "{{.Names}}",
        )
        return out.split()


def alive(proc: subprocess.Popen[str]) -> bool:
    """True while `proc` runs; a create that ended fails the test at once, with what it said."""
    if proc.poll() is None:
        return True
    raise AssertionError(f"surreal create ended early ({proc.returncode}): {proc.communicate()[1][-2000:]}")


@pytest.fixture
def cli(tmp_path: Path, engine: Engine, image: str) -> Iterator[Cli]:
    c = Cli(tmp_path / "home", engine)
    yield c
    for exp in (c.home / "experiments").glob("*"):  # whatever a failed test left
        c.run("delete", exp.name, ok=False)


def test_a_queued_run_is_resized_through_suspend_and_resume_losing_no_update(cli: Cli) -> None:
    """`--queue` in containers (a stand-in for Kueue that admits at once): the experiment is one
    JobSet. It starts as 2 learner ranks in one learner container (rank r on port 6000 + r of the
    learner's Service; actor-0 sends to rank 0, actor-1 to rank 1), then `surreal scale --agents 4
    --learner-pods 2` suspends it (every pod gets SIGTERM; rank 0 saves), status says "Suspended for
    resize to 4 agents" meanwhile, and it is made again as 2 learner pods and 4 actors, admitted,
    and resumes from that save exactly: 0 updates lost. A short run: that ranks learn as one learner
    does is proven on the local backend (tests/algorithms/test_ranks.py). 5 runs: the suspension's
    save came at 8.2-9.9k of the 40k steps, the resume was exact in each, 61-70 s a run."""
    cli.run("create", "qr", "--algo", "ppo", "--env", "CartPole-v1", "--agents", "2", "--learners", "2",
            "--steps", str(QUEUED_STEPS), "--seed", "1", "--queue", "team-a", "--backend", "containers",
            "--detach", timeout=300.0)  # fmt: skip

    def updates(at_least: int) -> dict[str, Any] | None:
        st = cli.status("qr")
        return st if st["phase"] == "Running" and (st["updates"] or 0) >= at_least else None

    # The resize comes at the first update (an update takes every rank's share: both actors sent).
    before = wait_until("an update", lambda: updates(1), 300.0, poll=0.2)
    assert before["admission"] == "Admitted", before
    [learner] = [c["name"] for c in before["components"] if c["role"] == "learner"]  # one pod, two ranks
    actors = sorted(c["name"] for c in before["components"] if c["role"] == "actor")

    # Not held: actors SIGSTOPped across the suspension lost their logs once in 5 loaded runs (a
    # stopped container's SIGTERM waits out its grace period; the resize removes it meanwhile). The
    # resize comes at the first update of a 40k-step run: still a bet on the machine's pace.
    scale = subprocess.Popen([SURREAL, "scale", "qr", "--agents", "4", "--learner-pods", "2"], env=cli.env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             stdin=subprocess.DEVNULL)  # fmt: skip
    try:
        during = wait_until("the resize to show", lambda: (st := cli.status("qr"))["admission"] != "Admitted"
                            and st, 120.0, poll=0.2)  # fmt: skip
        out, err = scale.communicate(timeout=300)
    finally:
        scale.kill()
    assert during["admission"] == "Suspended for resize to 4 agents", during
    assert scale.returncode == 0, err
    assert "made again with 4 agents in 4 actor containers and 2 learner pod(s)" in out, out
    for rank, actor in enumerate(actors):  # their logs are kept: actor-r sent to rank r
        assert f"connected to the learner at qr-learner:{6000 + rank}" in cli.run("logs", "qr", actor).stdout

    # `scale` returned once the controller started the new pods; the new learner reports its count.
    after = wait_until("the learner to run 4 agents", lambda: (st := cli.status("qr"))["agents"] == 4 and st,
                       120.0, poll=0.5)  # fmt: skip
    assert after["admission"] == "Admitted" and after["agents"] == 4, after
    final = wait_until("the end", lambda: (st := cli.status("qr"))["phase"] in ("Succeeded", "Failed") and st,
                       600.0, poll=1.0)  # fmt: skip
    wait_until("the run's containers to be removed", lambda: cli.containers("qr") == [], 120.0, poll=0.5)
    final = cli.status("qr")
    old = cli.run("logs", "qr", learner, "--lines", "100000").stdout
    [pod0] = [c["name"] for c in final["components"]
              if c["role"] == "learner" and "-peers-" not in c["name"] and c["name"] != learner]  # fmt: skip
    new = cli.run("logs", "qr", pod0, "--lines", "100000").stdout
    saves, resumes = SAVED.findall(old), RESUMED.findall(new)
    print(f"suspend's clean save {saves[-1] if saves else None}, resumed {resumes[:1]}; "
          f"learners {final['learners']}")  # fmt: skip
    assert final["phase"] == "Succeeded" and final["env_steps"] >= QUEUED_STEPS, (final["problem"], final)
    assert saves and resumes and resumes[0] == ("clean", *saves[-1]), (saves, resumes, new[-3000:])
    assert [r["pod"] for r in final["learners"]] == [0, 1], final["learners"]
    assert all(r["env_steps"] > 0 for r in final["learners"]), final["learners"]
    assert final["group_restarts"] == 0, final
    assert sorted(c["role"] for c in final["components"] if c["role"] != "tensorboard") == [
        "actor"] * 4 + ["evaluator", "learner", "learner"], final["components"]  # fmt: skip
    assert all(c["state"] == "Succeeded" for c in final["components"] if c["role"] == "actor"), final
    jobs = [(j["role"], j["state"]) for j in final["jobs"]]
    assert jobs == [("learner", "Complete")] * 2 + [("actor", "Complete"), ("evaluator", "Complete")], jobs
    cli.run("delete", "qr")
    assert cli.containers("qr") == []


QUEUED_STEPS = 40_000


SAVED = re.compile(r"checkpoint: version (\d+), (\d+) env steps, (\d+) updates.*\(clean\)")
RESUMED = re.compile(r"resumed from checkpoint \((clean|jumped)\): Counters\(version=(\d+), env_steps=(\d+), "
                     r"updates=(\d+)")  # fmt: skip


def test_learner_ranks_in_two_pods_ride_out_a_killed_pod_and_a_preempted_one(cli: Cli) -> None:
    """`--learners 2 --learner-pods 2`: two learner containers with their own hostnames on the
    run's network (`<job>-0.lp-ranks`), a rank each, meeting in pod 0's control store; gloo
    between them. SIGKILL to the peer pod's container once rank 0 has checkpointed: its Job
    replaces it, the group restarts from the checkpoint. Then SIGTERM to pod 0's container: rank 0
    saves, pod 0 is replaced and resumes from that save exactly (0 updates lost), the peer pod
    stays (a peer pod's loss is not its failure). The run ends Succeeded with each pod's intake in
    status.

    That two ranks learn as one learner does is proven once, on the local backend
    (tests/integration/test_learner_ranks.py solves CartPole through the same two faults); the
    ranks' update is the same code in one pod or two, only gloo's transport differs. This run
    proves the pods' mechanics, so it is as short as the faults allow: they came at 7-21k steps in
    14 runs of 100k steps (each of which solved, best eval 500.0), so STEPS leaves 19k steps past
    the latest."""
    cli.run("create", "lp", "--algo", "ppo", "--env", "CartPole-v1", "--agents", "2", "--learners", "2",
            "--learner-pods", "2", "--steps", str(STEPS), "--seed", "1", "--set", "checkpoint_seconds=2",
            "--backend", "containers", "--detach", timeout=300.0)  # fmt: skip

    def learner_container(peer: bool) -> str:
        names = cli.engine(
            "ps",
            "--filter",
            "label=surreal.io/experiment=lp",
            "--filter",
            "label=surreal.io/component=learner",
            "--format",
            "{{.Names}}",
        ).split()
        found = [n for n in names if ("-peers-" in n) == peer]
        return found[0] if len(found) == 1 else ""

    def updates(at_least: int) -> dict[str, Any] | None:
        st = cli.status("lp")
        return st if st["phase"] == "Running" and (st["updates"] or 0) >= at_least else None

    wait_until("10 updates", lambda: updates(10), 300.0, poll=0.5)
    wait_until("a timed checkpoint", lambda: "checkpoint: version" in cli.run("logs", "lp", "learner").stdout
               and learner_container(True), 60.0)  # fmt: skip
    # Each fault is injected with the actors held (SIGSTOP): the run cannot reach its steps before
    # the fault's recovery is seen, however fast the machine.
    with held_containers(cli.engine, cli.running("lp", "actor")):
        cli.engine("kill", "--signal", "KILL", learner_container(True))
        killed = wait_until(
            "the group's restart",
            lambda: (st := cli.status("lp")).get("group_restarts") and st,
            180.0,
            poll=0.5,
        )
    wait_until("5 more updates", lambda: updates(killed["updates"] + 5), 180.0, poll=0.5)
    with held_containers(cli.engine, cli.running("lp", "actor")):
        pod0 = learner_container(False)
        peer = learner_container(True)
        cli.engine("kill", "--signal", "TERM", pod0)
        replacement = wait_until(
            "pod 0's replacement", lambda: (c := learner_container(False)) and c != pod0 and c, 120.0
        )
        assert (st := cli.status("lp"))["env_steps"] < STEPS, st

    final = wait_until("the end", lambda: (st := cli.status("lp"))["phase"] in ("Succeeded", "Failed") and st,
                       600.0, poll=1.0)  # fmt: skip
    # The run's end is written (every container's log kept, the containers removed) a little later.
    wait_until("the run's containers to be removed", lambda: cli.containers("lp") == [], 120.0, poll=0.5)
    final = cli.status("lp")
    old = cli.run("logs", "lp", pod0, "--lines", "100000").stdout
    new = cli.run("logs", "lp", replacement, "--lines", "100000").stdout
    saves = SAVED.findall(old)
    resumes = RESUMED.findall(new)
    print(f"SIGTERM's clean save {saves[-1] if saves else None}, the replacement resumed {resumes[:1]}; "
          f"best eval return {final['best_eval_return']}, learners {final['learners']}")  # fmt: skip
    assert final["phase"] == "Succeeded" and final["env_steps"] >= STEPS, final
    said = [ln for ln in new.splitlines() if "rank 0" in ln or "ranks" in ln][-40:]
    assert saves and resumes and resumes[0] == ("clean", *saves[-1]), (saves, resumes, replacement, said)
    assert [r["pod"] for r in final["learners"]] == [0, 1] and all(
        r["env_steps"] > 0 for r in final["learners"]
    )
    components = {c["name"]: c for c in final["components"]}
    assert components[pod0]["detail"].startswith("exit code 143"), components[pod0]
    # The peer pod rode out pod 0's loss: the same container to the end.
    assert components[peer]["state"] == "Succeeded" and components[peer]["restarts"] == 0, components[peer]
    assert sum("-peers-" in name for name in components) == 2, components  # the killed one, its replacement
    cli.run("delete", "lp")


STEPS = 40_000  # the learner-pods run above: its docstring says why


def test_scale_starts_and_stops_actor_containers_and_the_learner_follows(cli: Cli) -> None:
    cli.run("create", "sc", "--algo", "ppo", "--env", "CartPole-v1", "--agents", "2", "--steps", "50000000",
            "--backend", "containers", "--detach", timeout=300.0)  # fmt: skip
    wait_until("the run to make steps", lambda: (cli.status("sc")["env_steps"] or 0) > 0, 300, poll=1.0)
    [learner] = [c["name"] for c in cli.status("sc")["components"] if c["role"] == "learner"]
    started = cli.engine("inspect", "--format", "{{.State.StartedAt}}", learner).strip()

    assert "4 agents in 4 actor containers" in cli.run("scale", "sc", "--agents", "4", timeout=300.0).stdout
    st = wait_until(
        "4 actors to connect", lambda: (s := cli.status("sc"))["connected_actors"] == 4 and s, 300, 1.0
    )
    assert st["agents"] == 4 and st["actor_pods"] == {"ready": 4, "total": 4}, st
    assert st["wire_rejections"]["too_many_streams"] == 0, st

    cli.run("scale", "sc", "--agents", "1", timeout=300.0)
    st = wait_until(
        "3 actors to leave", lambda: (s := cli.status("sc"))["connected_actors"] == 1 and s, 300, 1.0
    )
    assert st["agents"] == 1 and st["actor_pods"]["total"] == 1 and st["phase"] == "Running", st
    # The actors' Job runs index 0 only: the pods of the dropped indexes are gone, as the Job
    # controller deletes them, and their logs are kept.
    assert [c for c in cli.containers("sc") if c.startswith("sc-actor-")] == [
        next(c["name"] for c in st["components"] if c["role"] == "actor")
    ]
    assert next(j for j in st["jobs"] if j["role"] == "actor")["completions"] == "0/1"
    # The same learner container, never restarted or replaced.
    assert [c["name"] for c in st["components"] if c["role"] == "learner"] == [learner]
    assert cli.engine("inspect", "--format", "{{.State.StartedAt}}", learner).strip() == started
    cli.run("delete", "sc", timeout=300.0)
    assert cli.containers("sc") == []
    assert not (cli.home / "experiments" / "sc").exists()


DT_STEPS = 8_000  # the detached SAC run below


def test_a_detached_run_ends_by_itself_and_frees_every_container_then_list_status_logs_delete(
    cli: Cli,
) -> None:
    """A detached create in 6 containers, to its end with no `surreal delete`: the run's controller
    sees the learner's Job complete, waits for the workers' pods to end on their own, keeps the
    logs and removes the containers; then the rest of the CLI on what is left. An off-policy run,
    so that the replay shard's Indexed Job (its stable name through the headless Service, the
    learner's claim it saves to) is proven in real containers too; PPO's detached runs are the
    resize's below and test_pods.py's, with faults. Its shard is preempted mid-run (SIGTERM to its
    container): it saves to the claim, its replacement restores every row. A short run: SAC learning
    Pendulum is proven on the local backend (tests/integration/test_sac.py), so this one trains an
    eighth of the preset's replay ratio: 55-86 s a run, 3 runs (in one the actors took 30 s to
    reach the replacement shard; in the others under 10 s)."""
    cli.run(
        "create",
        "dt",
        "--algo",
        "sac",
        "--env",
        "Pendulum-v1",
        "--agents",
        "2",
        "--steps",
        str(DT_STEPS),
        "--seed",
        "1",
        "--set",
        "eval_episodes=2",
        "--set",
        "replay_ratio=32",
        "--backend",
        "containers",
        "--detach",
        timeout=300.0,
    )
    # Preemption of the shard mid-run: SIGTERM to its container; it saves its rows to the claim
    # and its replacement (the same index, the same stable name) restores them. The actors are held
    # (SIGSTOP) from when the shard holds rows until the replacement has restored them: the run
    # cannot end first (a done shard has nothing to save), however fast the machine.
    note = lambda: next(cli.home.rglob("replay/shard-0.json"), None)  # noqa: E731
    wait_until("the shard to hold rows", lambda: (n := note()) and json.loads(n.read_text())["size"] >= 500,
               300, poll=0.5)  # fmt: skip
    with held_containers(cli.engine, cli.running("dt", "actor")):
        [shard] = [c for c in cli.containers("dt") if c.startswith("dt-replay-0")]
        cli.engine("kill", "--signal", "TERM", shard)
        wait_until(
            "the shard's replacement to restore its rows",
            lambda: any(
                "restored" in cli.run("logs", "dt", c, ok=False).stdout
                for c in cli.running("dt", "replay")
                if c != shard
            ),
            300,
            poll=1.0,
        )
        assert (n := note()) is not None and json.loads(n.read_text())["inserted"] < DT_STEPS
    record = cli.home / "experiments" / "dt" / "containers.json"
    wait_until("the run to end", lambda: "phase" in json.loads(record.read_text()), 600, poll=1.0)
    assert cli.containers("dt") == []  # the run is done: its containers are gone, its files stay
    st = cli.status("dt")
    assert (st["backend"], st["phase"], st["agents"]) == ("containers", "Succeeded", 2), st
    assert st["env_steps"] >= 2_000 and st["eval_return"] is not None, st
    assert {c["role"] for c in st["components"]} == {"learner", "replay", "actor", "evaluator", "tensorboard"}
    # The shard held the actors' transitions, none lost (the SIGTERM's were kept), and the learner
    # trained on them.
    replay = st["replay"]
    assert replay["size"] > 0 and replay["lost"] == replay["refused_fragments"] == 0, st
    assert st["rows_trained"] > 0, st
    # Every Job's pod exited 0 by itself once the run was done; none had to be stopped. (Seen
    # failing once, under load, before its logs were kept here: the end of each stopped pod's log.)
    stopped = json.loads(record.read_text())["stopped_at_end"]
    logs = cli.home / "experiments" / "dt" / "logs"
    assert stopped == [], {pod: (logs / f"{pod}.log").read_text()[-1500:] for pod in stopped}
    # ...but the preempted shard's, which saved its rows: its replacement restored every one of them.
    [preempted] = [c for c in st["components"] if c["state"] != "Succeeded" and c["role"] != "tensorboard"]
    assert (preempted["name"], preempted["state"]) == (shard, "Stopped"), preempted
    assert "preempted" in preempted["detail"], preempted
    logdir = cli.home / "experiments" / "dt" / "logs"
    logs = "".join(p.read_text() for p in logdir.glob("dt-replay-0-*.log"))
    [saved] = re.findall(r"replay shard 0: saved (\d+) rows", logs)
    assert replay["restored"] == int(saved) >= 500 and replay["lost"] == 0, replay
    assert [(j["role"], j["state"]) for j in st["jobs"]] == [
        ("learner", "Complete"), ("actor", "Complete"), ("evaluator", "Complete"),
        ("replay", "Complete")]  # fmt: skip
    assert (
        "experiment dt: Succeeded"
        in (cli.home / "experiments" / "dt" / "logs" / "controller.log").read_text()
    )
    [row] = json.loads(cli.run("list", "-o", "json").stdout)
    assert (row["name"], row["backend"], row["phase"]) == ("dt", "containers", "Succeeded"), row
    learner_log = cli.run("logs", "dt", "learner").stdout
    assert "run complete" in learner_log, learner_log[-2000:]
    # Actor 1 inserts into the shard's stable name (the headless Service's, as on Kubernetes).
    actor_log = cli.run("logs", "dt", "actor-1").stdout
    assert "connected to the replay shard at dt-replay-0.dt-replay:7000" in actor_log, actor_log[-2000:]
    assert cli.run("delete", "dt").stdout.strip() == "experiment 'dt' deleted"
    assert not (cli.home / "experiments" / "dt").exists() and cli.containers("dt") == []
    assert cli.run("status", "dt", ok=False).returncode == 1


def test_no_engine_is_one_line_and_creates_nothing(cli: Cli, tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {**cli.env, "PATH": f"{empty}{os.pathsep}{Path(sys.executable).parent}"}
    proc = cli.run("create", "ne", "--algo", "ppo", "--backend", "containers", ok=False, env=env)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "surreal: error: no container engine: install podman (apt-get install podman runc) or start Docker"
    ]
    assert not (cli.home / "experiments" / "ne").exists()


def test_a_missing_image_is_one_line_and_creates_nothing(cli: Cli) -> None:
    proc = cli.run("create", "ni", "--algo", "ppo", "--backend", "containers", "--image",
                   "localhost/surreal:no-such-tag", ok=False)  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "surreal: error: image localhost/surreal:no-such-tag is not in "
        f"{cli.engine.name}'s store (build it: make image IMAGE=localhost/surreal:no-such-tag)"
    ]
    assert not (cli.home / "experiments" / "ni").exists() and cli.containers("ni") == []


def test_interrupting_a_foreground_create_removes_every_container(cli: Cli) -> None:
    """SIGTERM to a foreground create (Ctrl-C takes the same path: test_interrupts.py)."""
    sig = signal.SIGTERM
    proc = subprocess.Popen([SURREAL, "create", "intr", "--algo", "ppo", "--steps", "50000000", "--backend",
                             "containers"], env=cli.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, stdin=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_until("5 containers", lambda: alive(proc) and len(cli.containers("intr")) == 5, 300, 1.0)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "intr: Stopped" in err, err
    assert cli.containers("intr") == []
    assert cli.status("intr")["phase"] == "Stopped"
    network = json.loads((cli.home / "experiments" / "intr" / "containers.json").read_text())["plan"][
        "network"
    ]
    assert network not in cli.engine("network", "ls", "--format", "{{.Name}}").split()

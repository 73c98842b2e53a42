"""orchestrator/sizing.py: the agents packed into actor workers from what this machine measures, on
every backend; what the user set wins; the algorithm learns from the same agents and settings.

The rule is proven on made-up rates (a Measure of our own); one create measures for real, through
the installed command, and a second one finds it in the cache."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import yaml
from cli_world import surreal

from surreal.orchestrator import sizing
from surreal.orchestrator.kube import render as kr
from surreal.orchestrator.program import ACTOR_CPU, ACTOR_MEMORY_MB, local_split
from surreal.orchestrator.status import status_object
from surreal.spec import build_spec


def spec(backend: str = "kube", agents: int = 512, **flags: object):  # type: ignore[no-untyped-def]
    overrides = flags.pop("overrides", None)
    flags = {"algo": "ppo", "env": "CartPole-v1", "backend": backend, "agents": agents, **flags}
    return build_spec("exp1", flags=flags, overrides=overrides)


class Rates:
    """A made-up machine: one learner consumes `learner`; one actor CPU makes `actor(k)` with k
    agents in its worker. Records the worker sizes it was asked to measure."""

    def __init__(self, learner: float, actor, memory_per_agent: float = 1.0) -> None:  # type: ignore[no-untyped-def]
        self.learner, self.actor, self.memory, self.asked = learner, actor, memory_per_agent, []

    def __call__(self, agents: int) -> sizing.Measured:
        self.asked.append(agents)
        return sizing.Measured(agents, self.actor(agents), self.learner, self.memory * agents, 0.25)


def actor_job(objects: list[dict]) -> dict:
    return next(o for o in objects if o["kind"] == "Job" and o["metadata"]["name"].endswith("-actor"))


def actor_pods(objects: list[dict]) -> tuple[int, float]:
    job = actor_job(objects)
    cpu = job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"]
    return job["spec"]["parallelism"], float(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)


def test_actor_pods_make_what_the_learner_consumes() -> None:
    # The example: one learner consumes ~48k steps/s, one actor CPU makes ~6k.
    rates = Rates(48_000, lambda k: 6_000.0)
    sized = sizing.size(spec(), rates)
    assert (sized.agents_per_pod, sized.sizing["workers"], sized.sizing["actor_cpu"]) == (64, 8, 1.0)
    assert rates.asked == [32]  # fatter workers than measured only go faster: no second measurement
    assert sized.sizing["by"] == "calibration"
    assert sized.sizing["why"].startswith("8 actor pods x 64 agents at 1 CPU: one learner consumes ~48,000")
    pods, cpu = actor_pods(kr.render(sized, token="t" * 43))
    assert pods == 8 and pods * cpu == pytest.approx(8.0)


@pytest.mark.parametrize(
    ("learner", "actor", "asked"),
    [(9_000, 30_000, "300m"), (52, 25_000, "3m")],  # PPO CartPole's share; SAC Pendulum's (update-bound)
)
def test_a_learner_that_needs_a_fraction_of_a_core_gets_one_pod_asking_for_that_fraction(
    learner: float, actor: float, asked: str
) -> None:
    sized = sizing.size(spec(), Rates(learner, lambda k: actor))
    assert (sized.sizing["workers"], sized.agents_per_pod) == (1, 512)
    need = sized.sizing["actor_cpus_needed"]
    objects = kr.render(sized, token="t" * 43)
    pods, cpu = actor_pods(objects)
    assert need <= pods * cpu <= 2 * need  # within 2x of what the learner consumes
    resources = actor_job(objects)["spec"]["template"]["spec"]["containers"][0]["resources"]
    # The request is the share; the limit a core, so the pod starts and bursts as a whole one would.
    assert resources["requests"]["cpu"] == asked and resources["limits"]["cpu"] == "1"
    assert resources["requests"]["memory"] == resources["limits"]["memory"]
    # Memory follows the agents a pod holds: 1 MiB an agent measured, in steps of 256 MiB.
    assert sized.sizing["actor_memory_mb"] == ACTOR_MEMORY_MB + 512


def test_smaller_workers_than_measured_are_measured_again() -> None:
    # Batching: an actor CPU makes more with more agents in its worker. When the first measurement
    # (32 agents) asks for smaller workers, they are slower: the sizing measures them and asks again.
    rates = Rates(100_000, lambda k: 1_000.0 * math.sqrt(k))
    sized = sizing.size(spec(), rates)
    assert rates.asked == [32, 16]  # 100k / 5.7k = 17.7 -> 32 pods of 16; at 16: 25 -> still 32
    assert (sized.sizing["workers"], sized.agents_per_pod) == (32, 16)
    rates = Rates(200_000, lambda k: 1_000.0 * math.sqrt(k))
    sized = sizing.size(spec(), rates)
    assert rates.asked == [32, 8]  # 35.4 -> 64 pods of 8 agents: measured at 8 -> 70.7 -> 128 pods
    assert (sized.sizing["workers"], sized.agents_per_pod) == (128, 4)
    assert sized.sizing["actor_cpus_needed"] == pytest.approx(200_000 / (1_000 * math.sqrt(8)), abs=0.01)


def test_pods_divide_the_agents_and_serve_every_learner_rank() -> None:
    sized = sizing.size(spec(agents=96), Rates(50_000, lambda k: 10_000.0))
    assert (sized.sizing["workers"], sized.agents_per_pod) == (6, 16)  # 5 needed: 96 / 6 = 16
    sized = sizing.size(spec(agents=64, learners=4), Rates(1_000, lambda k: 50_000.0))
    assert (sized.sizing["workers"], sized.agents_per_pod) == (4, 16)  # one pod a rank at least


def test_a_worker_holds_no_more_than_it_can_step_or_send(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        sizing, "envs_problem", lambda spec, split, knob: "too many" if max(split) > 100 else None
    )
    sized = sizing.size(spec(), Rates(1_000, lambda k: 50_000.0))
    assert (sized.sizing["workers"], sized.agents_per_pod) == (8, 64)  # 512 / 100 -> 6, and 8 divides


def test_locally_the_workers_are_processes_at_most_one_per_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sizing, "cores", lambda: 2)
    sized = sizing.size(spec("local", agents=8), Rates(50_000, lambda k: 10_000.0))
    assert (sized.sizing["workers"], sized.agents_per_pod, sized.sizing["actor_cpu"]) == (2, 4, ACTOR_CPU)
    assert "(this machine has 2 cores)" in sized.sizing["why"]
    assert local_split(8, cpus=2, per_worker=sized.agents_per_pod) == [4, 4]
    sized = sizing.size(spec("local", agents=8), Rates(5_000, lambda k: 10_000.0))
    assert (sized.sizing["workers"], sized.agents_per_pod) == (1, 8)
    assert local_split(8, cpus=2, per_worker=sized.agents_per_pod) == [8]
    assert sized.sizing["why"].startswith("1 actor process x 8 agents: one learner")


def test_what_the_user_set_wins_and_is_compared() -> None:
    rates = Rates(48_000, lambda k: 6_000.0)
    sized = sizing.size(spec(agents_per_pod=4), rates)
    assert (sized.agents_per_pod, sized.sizing["workers"], sized.sizing["by"]) == (4, 128, "you")
    assert rates.asked == [4]
    assert sized.sizing["why"].startswith("128 actor pods x 4 agents at 1 CPU, set by you: one learner")
    assert (
        sizing.size(spec(agents_per_pod=4), None).sizing["why"]
        == "128 actor pods x 4 agents at 1 CPU: set by you"
    )


def test_the_packing_never_changes_what_the_algorithm_learns_from() -> None:
    by_hand = sizing.size(spec(agents_per_pod=64), None)
    sized = sizing.size(spec(), Rates(48_000, lambda k: 6_000.0))
    assert sized.agents_per_pod == by_hand.agents_per_pod
    assert (sized.agents, sized.config, sized.steps, sized.seed) == (by_hand.agents, by_hand.config,
                                                                     by_hand.steps, by_hand.seed)  # fmt: skip
    a, b = sized.to_dict(), by_hand.to_dict()
    assert {k: v for k, v in a.items() if k != "sizing"} == {k: v for k, v in b.items() if k != "sizing"}


def test_unmeasured_it_is_one_agent_a_worker_as_before() -> None:
    def cannot(agents: int) -> sizing.Measured:
        raise sizing.NotMeasurable

    def broken(agents: int) -> sizing.Measured:
        raise RuntimeError("their calibrate\nbroke")

    said: list[str] = []
    for measure in (None, cannot, broken):
        sized = sizing.size(spec(), measure, said.append)
        assert (sized.agents_per_pod, sized.sizing["workers"], sized.sizing["by"]) == (1, 512, "default")
        assert sized.sizing["actor_cpu"] == ACTOR_CPU and sized.sizing["actor_memory_mb"] == ACTOR_MEMORY_MB
    assert said[-1].startswith("the measurement failed (RuntimeError: their calibrate broke)")
    local = sizing.size(spec("local", agents=8), None)
    assert local.sizing["workers"] == min(8, sizing.cores())


@pytest.mark.parametrize("cpus", [1, 2, 3, 8, 16])
def test_an_unmeasured_local_packing_says_the_processes_it_runs(monkeypatch: pytest.MonkeyPatch, cpus: int
                                                                 ) -> None:  # fmt: skip
    """Locally a process a core at most: 8 agents on 2 cores are 2 processes of 4, and the sizing
    line says so (it said "2 actor processes x 1 agent" for 8 agents: seen with ES). The spec keeps
    the packing it split by, which `surreal scale` splits a new count by."""
    monkeypatch.setattr(sizing, "cores", lambda: cpus)
    for flags in ({}, {"agents_per_pod": 1}, {"agents_per_pod": 2}):
        local = sizing.size(spec("local", agents=8, **flags), None)
        assert local.agents_per_pod == flags.get("agents_per_pod", 1)
        split = local_split(8, cpus, per_worker=local.agents_per_pod)
        assert (local.sizing["workers"], local.sizing["agents_per_worker"]) == (len(split), max(split))
        assert local.sizing["why"].startswith(f"{len(split)} actor process"), local.sizing["why"]
        assert f"x {max(split)} agent" in local.sizing["why"]


def test_status_shows_the_sizing_line() -> None:
    sized = sizing.size(spec(), Rates(48_000, lambda k: 6_000.0))
    out = status_object(sized.to_dict(), backend="kube", phase="Running", metrics={}, components=[])
    assert out["sizing"] == sized.sizing["why"]


def test_a_measurement_is_kept_per_environment_algorithm_settings_and_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    from surreal.runtime.calibrate import Rates as Found

    def calibrate(self, config, env, agents, budget=1.0):  # type: ignore[no-untyped-def]
        calls.append(agents)
        return Found(1_000.0, 2_000.0, agents, 0.5, 3.0)

    from surreal.algorithms.api import OnPolicy

    monkeypatch.setattr(OnPolicy, "calibrate", calibrate)
    measure = sizing.measurer(spec(), cache=tmp_path)
    first, again = measure(32), measure(32)
    assert calls == [32] and not first.cached and again.cached and again.seconds == 0.0
    assert dataclasses.replace(again, seconds=first.seconds, cached=False) == first
    sizing.measurer(spec(overrides={"ppo.epochs": "5"}), cache=tmp_path)(32)  # other settings
    monkeypatch.setattr(sizing, "machine", lambda: "64 x another CPU")
    sizing.measurer(spec(), cache=tmp_path)(32)  # another machine
    assert calls == [32, 32, 32]
    for entry in tmp_path.iterdir():  # a damaged entry is measured again
        entry.write_text("{not json")
    assert not sizing.measurer(spec(), cache=tmp_path)(32).cached and len(calls) == 4


def test_create_measures_once_and_the_dry_run_shows_it(
    capsys: pytest.CaptureFixture[str], surreal_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real measurement, through the installed command: CartPole at 512 agents on Kubernetes."""
    monkeypatch.delenv(sizing.SKIP_VAR)
    args = ("create", "c1", "--algo", "ppo", "--env", "CartPole-v1", "--agents", "512", "--backend", "kube",
            "--dry-run", "-o", "yaml")  # fmt: skip
    code, out, err = surreal(capsys, *args)
    assert code == 0, err
    objects = list(yaml.safe_load_all(out))
    spec_data = yaml.safe_load(objects[0]["data"]["spec.yaml"])
    found = spec_data["sizing"]
    assert found["by"] == "calibration" and not found["cached"] and found["calibration_seconds"] > 0
    assert f"surreal: sizing: {found['why']}" in err
    pods, cpu = actor_pods(objects)
    assert (
        pods * found["agents_per_worker"] == 512 and spec_data["agents_per_pod"] == found["agents_per_worker"]
    )
    need = found["actor_cpus_needed"]
    assert need <= pods * cpu <= 2 * need  # within 2x of what the learner consumes
    code, out, err = surreal(capsys, *args)  # the same environment, algorithm, settings, machine
    assert code == 0, err
    assert yaml.safe_load(next(yaml.safe_load_all(out))["data"]["spec.yaml"])["sizing"]["cached"] is True
    code, out, _ = surreal(capsys, *args, "--no-calibrate")
    assert yaml.safe_load(next(yaml.safe_load_all(out))["data"]["spec.yaml"])["sizing"]["by"] == "default"


def test_a_learner_on_another_machine_measures_again_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from surreal.algorithms.api import OnPolicy
    from surreal.component import measure_again
    from surreal.runtime.calibrate import Rates as Found

    calls: list[int] = []

    def calibrate(self, config, env, agents, budget=1.0):  # type: ignore[no-untyped-def]
        calls.append(agents)
        return Found(12_000.0, 36_000.0, agents, 0.5, 3.0)

    monkeypatch.setattr(OnPolicy, "calibrate", calibrate)
    sized = sizing.size(spec(), Rates(48_000, lambda k: 6_000.0))
    assert measure_again(sized, tmp_path) is None and calls == []  # where create measured
    monkeypatch.setattr(sizing, "machine", lambda: "16 x a pod's CPU")
    with caplog.at_level("INFO"):
        line = measure_again(sized, tmp_path)
    assert line is not None and line in caplog.text and calls == [32]
    assert line.startswith("sizing: measured again on 16 x a pod's CPU (create measured on ")
    assert ("one learner consumes ~36,000 env steps/s, one actor CPU makes ~12,000 with 32 agents: "
            "~3.00 actor CPUs keep it busy, against 8 asked") in line  # fmt: skip
    assert measure_again(sized, tmp_path) == line and calls == [32]  # kept beside its checkpoints
    assert measure_again(sizing.size(spec(), None), tmp_path) is None  # create measured nothing

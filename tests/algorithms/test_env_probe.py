"""A user's environment checked at create and named as theirs in a run (tests/envs/hostile.py).

`resolve_env`, what `surreal create` writes into the spec, builds one instance, resets it and steps
it once: whatever breaks what a component relies on is one ValueError naming the environment, and
whatever passes is a ResolvedEnv every component accepts. In a component, the environment's own
exceptions and an actor's environments that give only non-finite data (BROKEN_STEPS, counted in
steps) are EnvFailed: a fatal exit of the role, with the reason.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from surreal import component
from surreal.orchestrator.policy import POLICIES
from surreal.orchestrator.program import ENV_TERMINATION_LOG
from surreal.runtime import preemption
from surreal.runtime.envs import ref as env_ref
from surreal.runtime.envs.make import (
    BROKEN_STEPS,
    EnvBatch,
    EnvFailed,
    make_env,
    resolve_env,
    spaces_for,
)
from surreal.runtime.envs.ref import EnvRef
from surreal.runtime.es import actor as es_actor
from surreal.runtime.es.actor import ESWorker, agent_ids
from surreal.runtime.es.config import ESConfig
from surreal.runtime.es.master import ESMaster
from surreal.runtime.exits import EXIT_ENV_FAILED, EXIT_PREEMPTED

ENVS = Path(__file__).resolve().parents[1] / "envs"


@pytest.fixture(autouse=True)
def user_modules() -> Iterator[None]:
    env_ref.extend_import_path([str(ENVS)])
    yield


# What `create` refuses, by what it says (after "environment 'hostile:NAME': ").
REFUSED = {
    "InfiniteActions": "its spaces cannot be trained on: action_low and action_high must be finite",
    "EmptyObservations": "its spaces cannot be trained on: obs_dim must be a positive integer, got 0",
    "ResetShape": "reset gave an array of shape (3,) (float32), which its observation space "
    "Box(-inf, inf, (4,), float32) does not describe (ValueError: could not broadcast",
    "StepShape": "step gave an array of shape (5,) (float32), which its observation space",
    "NaNReset": "reset gave a non-finite observation or a reward that is not a finite number",
    "InfiniteReward": "step gave a non-finite observation or a reward that is not a finite number",
    "DictMissingKey": "reset gave a dict, which its observation space Dict('cell': Discrete(3), "
    "'pos': Box(-inf, inf, (4,), float32)) does not describe (KeyError: 'cell')",
    "NoActionSpace": "its action_space is missing, not a gymnasium space",
    "TupleActions": "its action_space is a tuple, not a gymnasium space",
    "RaisesInReset": "reset failed: RuntimeError: no licence",
    "RaisesInStep": "step failed: ValueError: boom",
    "ExitsInConstructor": "cannot be made: SystemExit: 3",
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_the_probe_refuses_what_a_component_could_not_run_in_one_line(name: str) -> None:
    with pytest.raises(ValueError) as err:
        resolve_env(f"hostile:{name}")
    text = str(err.value)
    assert text.startswith(f"environment 'hostile:{name}': {REFUSED[name]}"), text
    assert "\n" not in text and len(text) < 600


@pytest.mark.parametrize("name", ["Plain", "Float64Observations", "Flaky"])
def test_what_passes_the_probe_is_what_every_component_accepts(name: str) -> None:
    facts = resolve_env(f"hostile:{name}")
    facts.validate()
    assert facts.obs_dim == 4 and facts.action_low == (-1.0, -1.0)


def test_a_module_that_exits_or_parses_arguments_on_import_is_named_and_its_noise_dropped(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "exits_on_import.py").write_text("import sys\nprint('hello')\nsys.exit(2)\n")
    (tmp_path / "argv_on_import.py").write_text(
        "import argparse\nargparse.ArgumentParser().parse_args(['--lr', '3'])\n"
    )
    env_ref.extend_import_path([str(tmp_path)])
    for module in ("exits_on_import", "argv_on_import"):
        with pytest.raises(ValueError) as err:
            resolve_env(f"{module}:Env")
        assert str(err.value) == f"environment '{module}:Env': cannot import module '{module}': SystemExit: 2"
    assert capfd.readouterr() == ("", "")  # argparse's usage and the print never reach the CLI's output


def test_a_ctrl_c_in_the_users_code_still_interrupts(tmp_path: Path) -> None:
    (tmp_path / "interrupts_on_import.py").write_text("raise KeyboardInterrupt\n")
    env_ref.extend_import_path([str(tmp_path)])
    with pytest.raises(KeyboardInterrupt):
        resolve_env("interrupts_on_import:Env")


def flaky(fail: str, after: int = 2) -> EnvRef:
    return EnvRef("hostile:Flaky", {"fail": fail, "after": after})


def test_an_exception_of_the_environment_in_a_run_is_the_roles_fatal_exit_naming_it() -> None:
    batch = EnvBatch(flaky("raise"), 2, seed=0)
    batch.reset()
    batch.step(np.zeros((2, 2), np.float32))
    with pytest.raises(EnvFailed) as err:
        batch.step(np.zeros((2, 2), np.float32))
    assert err.value.code == EXIT_ENV_FAILED
    assert str(err.value) == "environment 'hostile:Flaky': step failed: ValueError: boom at step 2"
    assert all(EXIT_ENV_FAILED in policy.fatal_exits for policy in POLICIES.values())
    with pytest.raises(EnvFailed, match="cannot be made with env_kwargs"):  # its constructor, in a run
        EnvBatch(EnvRef("hostile:Flaky", {"nope": 1}), 1, seed=0)


def test_a_stop_asked_for_while_the_environment_steps_is_not_its_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    batch = EnvBatch("hostile:Plain", 1, seed=0)
    batch.reset()
    monkeypatch.setattr(batch.envs[0], "step", lambda action: preemption.on_sigterm())
    monkeypatch.setattr(preemption, "_requested", threading.Event())
    with pytest.raises(SystemExit) as err:
        batch.step(np.zeros((1, 2), np.float32))
    assert err.value.code == EXIT_PREEMPTED


def test_an_actor_whose_environments_give_only_non_finite_data_fails_after_broken_steps() -> None:
    batch = EnvBatch(flaky("nan", after=1), 3, seed=0)
    batch.reset()
    for _ in range(BROKEN_STEPS - 1):  # every episode ends at once, rejected: no NaN leaves the batch
        assert np.isfinite(batch.step(np.zeros((3, 2), np.float32)).obs).all()
    with pytest.raises(EnvFailed) as err:
        batch.step(np.zeros((3, 2), np.float32))
    assert str(err.value) == (
        f"environment 'hostile:Flaky': all 3 made here gave a non-finite observation or reward at each "
        f"of {BROKEN_STEPS} steps in a row: nothing but rejected data"
    )
    assert batch.broken_episodes == 3 * BROKEN_STEPS


def test_one_healthy_environment_keeps_a_batch_of_broken_ones_going() -> None:
    batch = EnvBatch(flaky("nan", after=1), 2, seed=0)
    batch.envs[1] = make_env("hostile:Plain", 1)
    batch.reset()
    for _ in range(BROKEN_STEPS + 1):
        batch.step(np.zeros((2, 2), np.float32))
    assert batch.broken_episodes == BROKEN_STEPS + 1


CFG = ESConfig(policy="mlp", hidden_sizes=(8,), population=8, handout_ratio=1.0, sigma=0.5)


def es_worker(fail: str) -> ESWorker:
    master = ESMaster(CFG, spaces_for("hostile:Plain"), total_steps=10**9, num_agents=1, seed=5)
    worker = ESWorker(CFG, flaky(fail, after=1), agent_ids(0, 1), seed=0)
    worker.set_params(master.params())
    return worker


def test_an_es_worker_names_its_environments_exception_and_its_broken_pairs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    worker = es_worker("raise")
    worker.start_idle()
    with pytest.raises(
        EnvFailed, match="^environment 'hostile:Flaky': step failed: ValueError: boom at step 1$"
    ):
        worker.step()
    monkeypatch.setattr(es_actor, "BROKEN_STEPS", 3)  # the pairs one version hands out: 4
    worker = es_worker("nan")
    with pytest.raises(EnvFailed, match="3 pairs in a row here were dropped"):
        while worker.start_idle() or worker.busy:
            worker.step()
    assert worker.broken_pairs == 3


def test_a_worker_that_failed_for_good_says_why_in_its_termination_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "actor-0.termination"
    monkeypatch.setenv(ENV_TERMINATION_LOG, str(log))
    (tmp_path / "status.json").write_text(json.dumps({"env_steps": 5}))  # the learner's, not the actor's
    failed = EnvFailed("environment 'hostile:Flaky': step failed: ValueError: boom")
    component.write_termination_message(tmp_path, EXIT_ENV_FAILED, failed, learner=False)
    assert json.loads(log.read_text()) == {"phase": "Failed", "exit_code": 73, "reason": str(failed)}
    log.unlink()
    component.write_termination_message(tmp_path, 0, None, learner=False)  # a worker's success: nothing
    assert not log.exists()

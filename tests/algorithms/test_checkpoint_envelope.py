"""The checkpoint envelope PPO and ES share (checkpoint.Envelope): the same keys in every file, and
a file written before a field existed still resumes (the field takes its default), since running
experiments resume from their checkpoints."""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import pytest
import torch
from test_learner import CFG as PPO_CFG
from test_learner import ENV as PPO_ENV
from test_learner import fragment

from surreal.algorithms.ppo import PPO
from surreal.protocol.types import EvalReport
from surreal.runtime.checkpoint import (
    LATEST,
    Envelope,
    load_checkpoint,
    load_checkpoint_file,
    resumed_version,
)
from surreal.runtime.envs.make import spaces_for
from surreal.runtime.es.config import ESConfig
from surreal.runtime.es.master import ESMaster
from surreal.runtime.onpolicy.actor import Actor
from surreal.runtime.onpolicy.learner import Learner

ES_CFG = ESConfig(policy="linear", population=2, handout_ratio=1.0, max_staleness=1, checkpoint_every=5)
ENVELOPE_KEYS = {"counters", "train_returns", "eval", "clean", "saved_at"}


def ppo(exp_dir: Path) -> Learner:
    return Learner(PPO(), PPO_CFG, spaces_for(PPO_ENV), 10_000, seed=1, exp_dir=exp_dir)


def es(exp_dir: Path) -> ESMaster:
    return ESMaster(
        ES_CFG, spaces_for("CartPole-v1"), total_steps=10_000, num_agents=2, seed=3, exp_dir=exp_dir
    )


def trained_ppo(exp_dir: Path) -> Learner:
    learner = ppo(exp_dir)
    actor = Actor(PPO_CFG, PPO_ENV, num_envs=2, seed=3)
    actor.set_params(learner.params())
    while not learner.ready():
        learner.add_fragment(fragment(actor))
    learner.update()
    return learner


@pytest.mark.parametrize(
    ("make", "own_keys"),
    [(trained_ppo, {"model", "optimizer", "normalization"}), (es, {"arrays", "rejected"})],
    ids=["ppo", "es"],
)
def test_both_write_the_envelope_beside_their_own_state_and_read_it_back(tmp_path, make, own_keys):
    core = make(tmp_path)
    core.record_eval(EvalReport(core.counters.version, 64, -5.0, 10.0, 10, 1.0))
    core.save(clean=True)
    saved = load_checkpoint(tmp_path / "checkpoints")
    assert saved is not None and set(saved) == ENVELOPE_KEYS | own_keys
    # The mean, the best, and the mean's standard error (std 10 over 10 episodes: 10 / sqrt(9)) and count
    assert saved["clean"] is True and saved["eval"] == [-5.0, -5.0, pytest.approx(10 / 3), 10]
    envelope, state = Envelope.open(saved)
    assert set(state) == own_keys and envelope.counters == saved["counters"]
    assert (envelope.clean, envelope.eval_return, envelope.saved_at) == (True, -5.0, saved["saved_at"])
    assert (envelope.eval_stderr, envelope.eval_episodes) == (pytest.approx(10 / 3), 10)
    old = Envelope.open({**saved, "eval": [-5.0, -4.0]})[0]  # a checkpoint of before the standard error
    assert (old.eval_return, old.best_eval_return, old.eval_stderr, old.eval_episodes) == (
        -5.0,
        -4.0,
        None,
        None,
    )
    core.close()


@pytest.mark.parametrize("make", [ppo, es], ids=["ppo", "es"])
def test_a_checkpoint_from_before_a_field_existed_resumes_with_its_default(tmp_path, make):
    """Only the counters and the algorithm's state: no returns, evaluation, `clean` or `saved_at`,
    counters without `elapsed_seconds` and with a field since removed. The learner resumes with
    the defaults: no returns or evaluation yet, and an unclean checkpoint's jump of the version."""
    core = make(tmp_path)
    core.close()
    path = tmp_path / "checkpoints" / LATEST
    saved = torch.load(path, weights_only=True)
    counters = {k: v for k, v in saved["counters"].items() if k != "elapsed_seconds"}
    old = {k: v for k, v in saved.items() if k not in ENVELOPE_KEYS}
    torch.save({**old, "counters": {**counters, "version": 7, "updates": 3, "gone_since": 1}}, path)
    resumed = make(tmp_path)
    c = resumed.counters
    jumped = resumed_version(7, clean=False, checkpoint_every=resumed.cfg.checkpoint_every)
    assert (c.version, c.updates, c.elapsed_seconds) == (jumped, 3, 0.0)
    assert resumed.checkpoint_version == 7 and not hasattr(c, "gone_since")
    status = resumed.status()
    assert status["train_return"] is None and status["eval_return"] is None
    assert status["best_eval_return"] is None and 0.0 <= status["checkpoint_age_seconds"] < 60.0
    resumed.close()


def test_a_file_that_is_not_a_checkpoint_is_a_one_line_error_naming_it(tmp_path, monkeypatch):
    """Whatever torch raises (its advice to load with weights_only=False, a report of many lines)
    or warns, load_checkpoint_file raises one short ValueError line that names the file."""
    pickled = tmp_path / "pickled.pt"  # protocol 4, of a function: torch warns, then refuses
    pickled.write_bytes(pickle.dumps(print, protocol=4))
    torch.save(torch.zeros(2), tmp_path / "tensor.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning reaches the user either
        with pytest.raises(ValueError) as refused:
            load_checkpoint_file(pickled)
    assert (
        str(refused.value)
        == f"{pickled} is not a checkpoint surreal wrote (UnpicklingError: Weights only load failed)"
    )
    with pytest.raises(
        ValueError, match=r"tensor.pt is not a checkpoint surreal wrote \(it holds a Tensor\)$"
    ):
        load_checkpoint_file(tmp_path / "tensor.pt")
    with pytest.raises(ValueError, match=r"^cannot read .*nothing.pt: No such file or directory$"):
        load_checkpoint_file(tmp_path / "nothing.pt")

    def noisy(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("x" * 10_000 + "\nsecond line\n" + "y" * 10_000)

    monkeypatch.setattr(torch, "load", noisy)
    with pytest.raises(ValueError) as refused:
        load_checkpoint_file(pickled)
    line = str(refused.value)
    assert "\n" not in line and "second" not in line and len(line) < len(str(pickled)) + 260, line
    assert line.startswith(
        f"{pickled} is not a checkpoint surreal wrote (RuntimeError: xxx"
    ) and line.endswith("...)")

"""The end of a run and its evaluator: the learner waits for the evaluator's report on the final
version only while the evaluator is alive (it keeps calling, even during a long evaluation), and
evaluates the final version itself at once when the evaluator has gone silent, instead of waiting
out `final_eval_timeout`. On a fake clock: no test here sleeps."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import test_envs  # noqa: F401  (registers SurrealTestCountdown-v0)
from fake_time import Clock, ClockServer

from surreal.protocol.types import EvalReport, Params
from surreal.runtime import evaluator, serving
from surreal.runtime.envs.make import EnvBatch
from surreal.runtime.evaluator import FAILED_POLL_SECONDS, HEARTBEAT_SECONDS
from surreal.runtime.run import RunContext, progress_extras
from surreal.runtime.serving import (
    EVALUATOR_SILENCE_SECONDS,
    EVALUATOR_START_SECONDS,
    evaluator_alive,
)

START = 1000.0
FINAL_EVAL_TIMEOUT = 600.0  # the configs' default (ppo and es)


def test_a_live_evaluator_calls_well_within_the_silence_the_learner_tolerates() -> None:
    # Its longest gaps: a poll while it waits for a version (0.5 s), a retry while the learner does
    # not answer, a heartbeat during an evaluation; each with room for a busy machine.
    for gap in (0.5, FAILED_POLL_SECONDS, HEARTBEAT_SECONDS):
        assert 3 * gap <= EVALUATOR_SILENCE_SECONDS
    # Silence ends the wait long before the configured timeout does.
    assert EVALUATOR_SILENCE_SECONDS < EVALUATOR_START_SECONDS < FINAL_EVAL_TIMEOUT


def test_alive_while_heard_from_lately_or_never_heard_from_but_just_started() -> None:
    assert evaluator_alive(START + EVALUATOR_SILENCE_SECONDS - 0.1, START, started_at=START - 500)
    assert not evaluator_alive(START + EVALUATOR_SILENCE_SECONDS, START, started_at=START - 500)
    assert evaluator_alive(START + EVALUATOR_START_SECONDS - 0.1, None, started_at=START)
    assert not evaluator_alive(START + EVALUATOR_START_SECONDS, None, started_at=START)
    # Once heard from, only its silence counts: a recent start does not excuse it.
    assert not evaluator_alive(START + EVALUATOR_SILENCE_SECONDS, START, started_at=START + 1)


class Core:
    def __init__(self) -> None:
        self.final_evaluated = False


class Server(ClockServer):
    """What await_final_eval sees of the server on `clock`: the evaluator's calls at the times of
    `calls`, and its final report at `report_at` (None: never)."""

    def __init__(self, clock: Clock, core: Core, calls: list[float], report_at: float | None) -> None:
        super().__init__(clock)
        self.core, self.calls, self.report_at = core, calls, report_at

    @property
    def evaluator_heard_at(self) -> float | None:
        heard = [t for t in self.calls if t <= self.clock.now]
        if self.report_at is not None and self.report_at <= self.clock.now:
            self.core.final_evaluated = True
            heard.append(self.report_at)
        return max(heard, default=None)


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock(START)
    monkeypatch.setattr(serving, "time", clock)
    monkeypatch.setattr(evaluator, "time", clock)
    return clock


def waited(clock: Clock, calls: list[float], report_at: float | None, started_at: float = START) -> float:
    """Seconds await_final_eval waited from START, the final version published at START."""
    clock.now = START
    core = Core()
    loop = serving.ServingLoop.__new__(serving.ServingLoop)  # no real core or server: only this
    loop.core, loop.server = core, Server(clock, core, calls, report_at)  # type: ignore[assignment]
    loop._started_at = started_at
    loop.tick = lambda: None  # type: ignore[method-assign]
    loop.await_final_eval(FINAL_EVAL_TIMEOUT)
    return clock.now - START


def test_a_slow_evaluator_that_keeps_calling_is_waited_for_until_it_reports(clock: Clock) -> None:
    # The final evaluation takes 5 minutes, ten times the silence the learner tolerates; the
    # evaluator calls every HEARTBEAT_SECONDS meanwhile.
    calls = list(np.arange(START - 100, START + 300, HEARTBEAT_SECONDS))
    assert waited(clock, calls, report_at=START + 300) == pytest.approx(300, abs=0.5)


def test_an_evaluator_gone_silent_is_not_waited_for_past_its_silence(clock: Clock, caplog) -> None:
    # It fetched the final version, then died (killed past its budget): no report ever comes.
    waited_for = waited(clock, [START - 2, START + 0.5], report_at=None, started_at=START - 600)
    assert waited_for == pytest.approx(0.5 + EVALUATOR_SILENCE_SECONDS, abs=0.5)
    assert "the evaluator is silent (last heard from" in caplog.text


def test_an_evaluator_dead_long_before_the_end_is_not_waited_for_at_all(clock: Clock) -> None:
    assert waited(clock, [START - 500], report_at=None, started_at=START - 600) == 0


def test_an_evaluator_never_heard_from_is_waited_for_while_it_may_be_starting(clock: Clock) -> None:
    assert waited(clock, [], report_at=None, started_at=START - 20) == pytest.approx(
        EVALUATOR_START_SECONDS - 20, abs=0.5
    )
    # One that comes up late (a slow start) and reports is waited for.
    assert waited(clock, [START + 60], report_at=START + 70, started_at=START) == pytest.approx(70, abs=0.5)


def test_the_configured_timeout_still_bounds_the_wait(clock: Clock) -> None:
    calls = list(np.arange(START, START + 2 * FINAL_EVAL_TIMEOUT, HEARTBEAT_SECONDS))
    assert waited(clock, calls, report_at=None) == pytest.approx(FINAL_EVAL_TIMEOUT, abs=0.5)


class Learner:
    """A LearnerClient stand-in on `clock`: version 1, then the final version 2 from the second
    call on; it records when each call came and what it said of its caller."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.calls: list[tuple[float, str]] = []
        self.reports: list[EvalReport] = []

    def get_params(self, known_version: int, timeout: float, role: str) -> Params | None:
        self.calls.append((self.clock.now, role))
        version = 1 if len(self.calls) == 1 else 2
        latest = Params(version, {}, progress_extras(1000 * version, done=version == 2))
        return None if latest.version == known_version else latest

    def report_eval(self, report: EvalReport) -> None:
        self.reports.append(report)

    def close(self) -> None:
        pass


STEP_SECONDS = 4.0


class _Settings:
    eval_interval = 1000
    eval_episodes = 2


def test_the_evaluator_calls_as_the_evaluator_every_heartbeat_during_a_long_evaluation(
    clock: Clock, monkeypatch
) -> None:
    learner = Learner(clock)
    monkeypatch.setattr(evaluator, "LearnerClient", lambda addr, token: learner)

    def slow_policy(params: Params):
        def act(obs: np.ndarray) -> np.ndarray:
            clock.now += STEP_SECONDS  # an evaluation (3 steps) takes longer than a heartbeat
            return np.zeros(len(obs), np.int64)

        return act

    ctx = RunContext("SurrealTestCountdown-v0", 0, 2000, 1, Path("."), "127.0.0.1:1", "t")
    assert evaluator.run_evaluator(_Settings(), ctx, slow_policy, poll_seconds=0.01) == 0
    assert {role for _, role in learner.calls} == {"evaluator"}
    times = [t for t, _ in learner.calls]
    assert max(b - a for a, b in zip(times, times[1:], strict=False)) <= HEARTBEAT_SECONDS + STEP_SECONDS
    # The heartbeat brought the final version in during the evaluation of version 1: that report
    # still names version 1, and the final one follows.
    assert [(r.policy_version, r.env_steps) for r in learner.reports] == [(1, 1000), (2, 2000)]


def test_evaluate_calls_on_step_once_per_lockstep() -> None:
    envs = EnvBatch("SurrealTestCountdown-v0", 2, seed=0)
    steps = []
    try:
        policy = lambda obs: np.zeros(len(obs), np.int64)  # noqa: E731
        evaluator.evaluate(envs, policy, on_step=lambda: steps.append(1), min_steps=0)
    finally:
        envs.close()
    assert len(steps) == 3  # both episodes are cut at 3 steps


class GoneAfterFinal(Learner):
    """The final version is out from the second call on; from the report of the final version on,
    the learner is gone (it ended the run with its own evaluation)."""

    gone = False

    def get_params(self, known_version: int, timeout: float, role: str) -> Params | None:
        if self.gone:
            raise ConnectionError("learner gone")
        return super().get_params(known_version, timeout, role)

    def report_eval(self, report: EvalReport) -> None:
        if report.policy_version == 2:
            self.gone = True
            raise ConnectionError("learner gone")
        super().report_eval(report)


def test_an_evaluator_that_saw_the_final_version_ends_once_the_learner_is_gone(
    clock: Clock, monkeypatch, caplog
) -> None:
    # The learner stops serving only once the run has ended: an evaluator that has the final
    # version and cannot reach it is done after AFTER_FINAL_SECONDS, rather than GIVE_UP_SECONDS
    # (15 minutes: the backstop for a learner gone mid-run, whose replacement may come back).
    caplog.set_level(logging.INFO, logger=evaluator.__name__)
    learner = GoneAfterFinal(clock)
    monkeypatch.setattr(evaluator, "LearnerClient", lambda addr, token: learner)
    ctx = RunContext("SurrealTestCountdown-v0", 0, 2000, 1, Path("."), "127.0.0.1:1", "t")
    started = clock.now
    assert evaluator.run_evaluator(_Settings(), ctx, lambda p: lambda obs: np.zeros(len(obs), np.int64),
                                   poll_seconds=0.01) == 0  # fmt: skip
    waited_for, bound = clock.now - started, evaluator.AFTER_FINAL_SECONDS
    assert bound <= waited_for <= bound + 2 * FAILED_POLL_SECONDS, waited_for
    assert "the learner ended the run after its final version" in caplog.text

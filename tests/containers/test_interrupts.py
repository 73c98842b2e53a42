"""A foreground `surreal create --backend containers` ends the same way however it is stopped:
within `_interrupts()` SIGTERM and SIGHUP raise KeyboardInterrupt, as Ctrl-C does, so one path
removes what was started (proven with real containers, for SIGTERM, in test_backend.py)."""

from __future__ import annotations

import os
import signal

import pytest

from surreal.orchestrator.containers.launcher import _interrupts


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_every_stop_signal_is_a_keyboard_interrupt_while_the_run_is_watched(sig: signal.Signals) -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    with pytest.raises(KeyboardInterrupt):
        with _interrupts():
            os.kill(os.getpid(), sig)
            raise AssertionError("the signal did not interrupt")
    assert {s: signal.getsignal(s) for s in before} == before  # restored on the way out

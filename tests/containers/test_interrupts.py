"""A foreground `surreal create --backend containers` ends the same way however it is stopped:
within `_interrupts()` SIGTERM and SIGHUP raise KeyboardInterrupt, as Ctrl-C does, so one path
removes what was started (proven with real containers, for SIGTERM, in test_backend.py)."""

from __future__ import annotations

import signal

import pytest

from surreal.orchestrator.containers.launcher import _interrupts


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_every_stop_signal_is_a_keyboard_interrupt_while_the_run_is_watched(sig: signal.Signals) -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    # Ctrl-C as Python has it (a suite started in the background, `make test &`, ignores SIGINT).
    sigint = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt), _interrupts():
            signal.raise_signal(sig)  # to this thread, at once (os.kill may reach another thread first)
            raise AssertionError("the signal did not interrupt")
    finally:
        signal.signal(signal.SIGINT, sigint)
    assert {s: signal.getsignal(s) for s in before} == before  # restored on the way out

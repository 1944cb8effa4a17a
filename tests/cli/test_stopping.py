"""Long-running commands stop kindly: the first SIGTERM or SIGINT lets what is under way finish
(a reconcile pass records and reports what it found), a second one stops at once."""

from __future__ import annotations

import os
import signal
import threading

import orjson
import pytest

from cli.stopping import stop_on_signals
from ledger.services import reconcile as reconcile_service
from ledger.services.reconcile import Pass
from tests.plugins.cli import Invoke


def test_the_first_signal_asks_the_second_forces_and_the_handlers_come_back() -> None:
    before = signal.getsignal(signal.SIGINT)
    with stop_on_signals() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.wait(10)  # asked, and nothing raised
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            threading.Event().wait(10)  # the handler raises here, long before the timeout
    assert signal.getsignal(signal.SIGINT) is before


def test_a_reconcile_pass_under_way_finishes_and_reports_before_the_loop_stops(
    outcomes: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    passes: list[int] = []

    def interrupted_pass(*_args: object, **_kwargs: object) -> Pass:
        passes.append(1)
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while this pass records its findings
        threading.Event().wait(0.2)  # the handler runs in here, as in a pass's own waits
        return Pass(examined=1, recorded=["work.failed job-1"])

    monkeypatch.setattr(reconcile_service, "reconcile_once", interrupted_pass)
    result = outcomes("reconcile", "--interval", "0.1", "--json")
    assert passes == [1]  # no pass after the signal
    (line,) = result.stdout.splitlines()
    assert orjson.loads(line)["recorded"] == ["work.failed job-1"]

"""What the ledger itself says about a deployment's health (`outcomes status`): open jobs by
status, the active brakes, when the reconciler last recorded anything, and the outbox (messages
the broker has not confirmed, the longest wait, re-dispatches by their evidence). The broker's side
(workers answering, queue depth) is the adapters' to ask."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ledger.brake_view import BrakeView
from ledger.codes import Status
from ledger.queueing import DispatchSummary
from ledger.services.ledger import Ledger
from ledger.services.reconcile import ACTOR as RECONCILER


@dataclass(frozen=True)
class LedgerStatus:
    open_jobs: dict[str, int]  # queued / running / retrying → count (zeros included)
    brakes: list[BrakeView]
    last_reconcile: datetime | None  # the reconciler's last recorded finding
    last_position: int
    dispatch: DispatchSummary  # the outbox: unconfirmed dispatches, the oldest wait, evidence


def ledger_status(ledger: Ledger) -> LedgerStatus:
    with ledger.store.in_order() as reads:
        found = reads.summarize_jobs(None, None, None, None)
        brakes = reads.active_brakes()
        last = reads.last_event_by(RECONCILER)
        position = reads.last_position()
        dispatch = reads.dispatch_summary()
    open_jobs = {s.value: found.by_status.get(s.value, 0) for s in Status if not s.terminal}
    return LedgerStatus(open_jobs, brakes, last.recorded_at if last else None, position, dispatch)

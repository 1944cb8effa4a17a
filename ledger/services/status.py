"""What the ledger itself says about a deployment's health (`outcomes status`): open jobs by
status, the active brakes, when the reconciler last recorded anything, the outbox (messages
the broker has not confirmed, the longest wait, re-dispatches by their evidence) and the last
recorded verification (`outcomes audit verify`). The broker's side (workers answering, queue
depth) is the adapters' to ask.

Every figure is O(groups) or O(open jobs), whatever the ledger's size: the counts and the
reconciler's last finding are kept by the store, the position is the sequencer's head as it
stands, the last verification one index read."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ledger.brake_view import BrakeView
from ledger.codes import Status
from ledger.queueing import DispatchSummary
from ledger.runtime.ledger import Ledger
from ledger.verification_record import VerificationRecord


@dataclass(frozen=True)
class LedgerStatus:
    open_jobs: dict[str, int]  # queued / running / retrying → count (zeros included)
    brakes: list[BrakeView]
    last_reconcile: datetime | None  # the reconciler's last recorded finding
    last_position: int
    dispatch: DispatchSummary  # the outbox: unconfirmed dispatches, the oldest wait, evidence
    last_verification: VerificationRecord | None = None  # the last `audit verify` recorded


def ledger_status(ledger: Ledger) -> LedgerStatus:
    with ledger.store.reading() as reads:
        by_status = reads.count_statuses(None)
        brakes = reads.active_brakes()
        findings = reads.count_findings()
        position = reads.last_position()
        dispatch = reads.dispatch_summary()
        verified = reads.last_verification()
    open_jobs = {s.value: by_status.get(s.value, 0) for s in Status if not s.terminal}
    last = max((f.last_at for f in findings), default=None)
    return LedgerStatus(open_jobs, brakes, last, position, dispatch, verified)

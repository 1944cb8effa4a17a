"""What the ledger itself counts, read for the metrics at scrape time: jobs by decision,
status, code and tool, the active brakes, the last position, the reconciler's findings and
the outbox (jobs waiting, dispatches the broker has not confirmed, the oldest wait).

Read from the ledger, never counted in a process, so they agree with `outcomes audit summary`
whichever process answers and however often processes restart. The job and finding counts are
kept by the store as rows change (migration 0017) and the position is the sequencer's head as
it stands (no tick): a scrape costs the groups it reports, not the ledger's size.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from ledger.brake_view import BrakeView
from ledger.codes import Status
from ledger.event_log import FINDINGS
from ledger.queries import JobCount, JobFilter, SequencerState
from ledger.queueing import DispatchSummary
from ledger.runtime.ledger import Ledger


@dataclass(frozen=True)
class LedgerCounts:
    position: int  # the last position given when the counts were read
    jobs: list[JobCount]
    brakes: list[BrakeView]  # active
    findings: dict[tuple[str, str], int]  # (finding, cause) -> reconciler findings recorded
    dispatch: DispatchSummary  # the outbox: waiting, unconfirmed, the oldest wait
    # Where the sequencer stands: its lag and the events still waiting for a position (None:
    # sequenced at write).
    sequencer: SequencerState | None = None
    # When the oldest call still awaiting a person's approval was parked (docs/approvals.md).
    oldest_approval: datetime | None = None


def read(ledger: Ledger) -> LedgerCounts:
    sequencer = ledger.store.sequencer_state()
    with ledger.store.reading() as reads:
        position = reads.last_position()
        jobs = reads.count_jobs()
        found = reads.count_findings()
        brakes = reads.active_brakes()
        dispatch = reads.dispatch_summary()
        parked = reads.jobs(JobFilter(status=Status.AWAITING_APPROVAL.value, limit=1))
    findings: Counter[tuple[str, str]] = Counter()
    for item in found:
        findings[FINDINGS[item.type], item.cause] += item.events
    oldest = parked[0].created_at if parked else None
    return LedgerCounts(position, jobs, brakes, dict(findings), dispatch, sequencer, oldest)

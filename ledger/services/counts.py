"""What the ledger itself counts, read for the metrics at scrape time: jobs by decision,
status, code and tool, the active brakes, the last position, the reconciler's findings and
the outbox (jobs waiting, dispatches the broker has not confirmed, the oldest wait).

Read from the ledger, never counted in a process, so they agree with `outcomes audit summary`
whichever process answers and however often processes restart.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

from ledger.brake_view import BrakeView
from ledger.event_log import FINDINGS, finding_cause
from ledger.queries import EventFilter, JobCount, SequencerState
from ledger.queueing import DispatchSummary
from ledger.services.ledger import Ledger
from ledger.services.reconcile import ACTOR as RECONCILER

PAGE = 1000


@dataclass(frozen=True)
class LedgerCounts:
    position: int  # the last position: every count below covers the events up to it
    jobs: list[JobCount]
    brakes: list[BrakeView]  # active
    findings: dict[tuple[str, str], int]  # (finding, cause) -> reconciler findings recorded
    dispatch: DispatchSummary  # the outbox: waiting, unconfirmed, the oldest wait
    # Where the sequencer stood before this read caught up (None: sequenced at write).
    sequencer: SequencerState | None = None


class FindingTally:
    """The reconciler's findings by kind and cause, counted from its events.

    The events are read once: each read continues after the position the last one reached
    (ledger positions are given in commit order, so nothing can appear behind it later), so a
    scrape costs the events recorded since the previous one, not the whole ledger."""

    def __init__(self) -> None:
        self._after = 0
        self._counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def update(self, ledger: Ledger, upto: int) -> dict[tuple[str, str], int]:
        with self._lock:
            if upto > self._after:
                for event_type in FINDINGS:
                    self._count(ledger, event_type, upto)
                self._after = upto
            return dict(self._counts)

    def _count(self, ledger: Ledger, event_type: str, upto: int) -> None:
        after = self._after
        while True:
            where = EventFilter(type=event_type, after=after, limit=PAGE)
            with ledger.store.reading() as reads:  # below `upto`: sequenced already
                page = reads.find_events(where)
            for event in page:
                if event.position <= upto and event.actor == RECONCILER:
                    self._counts[(FINDINGS[event.type], finding_cause(event.payload))] += 1
            if len(page) < PAGE or page[-1].position >= upto:
                return
            after = page[-1].position


def read(ledger: Ledger, tally: FindingTally) -> LedgerCounts:
    # The lag as the sequencer left it: the in-order read below sequences what is waiting.
    sequencer = ledger.store.sequencer_state()
    with ledger.store.in_order() as reads:
        position = reads.last_position()
        jobs = reads.count_jobs()
        brakes = reads.active_brakes()
        dispatch = reads.dispatch_summary()
    findings = tally.update(ledger, position)
    return LedgerCounts(position, jobs, brakes, findings, dispatch, sequencer)

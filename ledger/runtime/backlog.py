"""The backlog ahead of a new job, measured from the ledger: how many jobs wait (queued or
retrying) and how fast workers start jobs while the queue does not run dry.

Submit refuses a job whose start deadline the backlog already exceeds (`Backlog.refuses`),
instead of queueing what cannot start in time. The drain rate counts only intervals in which
work waited at both ends and some started: the workers were busy all along, so what started is
their capacity, not the arrival rate of a quiet queue; an interval with nothing started (every
worker stopped) is no measure, and the last one stands. Sampled at most once a second per
process, on the outbox recorder's thread, never by a submit (a tick that never waits, then
three reads: the sequencer's head, the kept count of waiting jobs, the `work.started` events
since the last sample by position); a submit reads the latest figures.
"""

from __future__ import annotations

import logging
import time

from ledger.errors import LedgerError
from ledger.queueing import Backlog
from ledger.runtime.ledger import Ledger

log = logging.getLogger(__name__)
SAMPLE_S = 1.0
SMOOTHING = 0.5  # weight of the newest busy interval in the drain rate


class DrainRate:
    """Starts per second of busy intervals, smoothed (pure: fed by the gauge)."""

    def __init__(self) -> None:
        self.value: float | None = None

    def observe(self, seconds: float, starts: int, waiting_before: int, waiting_after: int) -> None:
        if seconds <= 0 or starts <= 0 or waiting_before <= 0 or waiting_after <= 0:
            return
        rate = starts / seconds
        self.value = rate if self.value is None else SMOOTHING * rate + (1 - SMOOTHING) * self.value


class BacklogGauge:
    def __init__(self, ledger: Ledger, sample_s: float = SAMPLE_S) -> None:
        self.ledger = ledger
        self.sample_s = sample_s
        self.rate = DrainRate()
        self._waiting = 0
        self._position: int | None = None
        self._at = float("-inf")

    def current(self) -> Backlog:
        """The latest figures, as they are: never a read. A submit asks this, so no agent's
        call waits for a sample (at 1M jobs, 35 partitions of `events`, a sample took 15-30 ms; the
        submit that found the figures stale paid it, once a second)."""
        return Backlog(self._waiting, self.rate.value)

    def sample_if_due(self) -> Backlog:
        """Sampled first when the figures are older than `sample_s`: the outbox's recorder
        thread calls this at its own pace, and it is the gauge's only sampler."""
        if time.monotonic() - self._at >= self.sample_s:
            self._sample()
        return self.current()

    def _sample(self) -> None:
        try:
            # The sequencer's head, after a tick that never waits (Postgres): another tick under
            # way is left to finish, and one taken here costs only what committed since the last
            # (once a second at most, by one caller), so the drain rate is measured even where
            # no reconciler sequences. Never a wait, never a read of the whole ledger.
            self.ledger.store.sequence(wait=False)
            with self.ledger.store.reading() as reads:
                position = reads.last_position()
                waiting = reads.waiting_count()
                starts = (
                    reads.starts_between(self._position, position)
                    if self._position is not None
                    else 0
                )
        except LedgerError as exc:
            log.debug("backlog: not sampled now: %s", exc)
            return
        moment = time.monotonic()
        if self._position is not None:
            self.rate.observe(moment - self._at, starts, self._waiting, waiting)
        self._waiting, self._position, self._at = waiting, position, moment

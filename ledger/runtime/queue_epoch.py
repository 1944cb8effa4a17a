"""The queue's epoch: the one evidence that confirmed messages are gone.

The broker keeps a marker with the queue (`ledger.dispatch.QueueMarker`; RabbitMQ, Redis and
the embedded broker each keep theirs, see `workers.queue_marker`), placed for an epoch the
ledger records (`queue_epochs`). Every message the outbox confirms is recorded under the epoch
it read before publishing. The reconciler asks for the marker on every pass: when it is gone,
the queue was deleted, re-created or wiped since, and every job confirmed under the old epoch
and still waiting is sent again, each re-dispatch recorded with that evidence. A broker that
cannot be asked is no evidence: nothing is sent again on a guess.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass

from ledger.clock import now
from ledger.dispatch import Dispatcher, QueueMarker
from ledger.errors import DispatchError, LedgerError
from ledger.runtime.ledger import Ledger

log = logging.getLogger(__name__)

EPOCH_REFRESH_S = 2.0  # how long a process keeps the epoch it read


@dataclass(frozen=True)
class EpochCheck:
    epoch: str | None  # the queue's current epoch after the check (None: none known)
    lost: str | None = None  # the epoch whose marker was found gone, if one was


def check(ledger: Ledger, marker: QueueMarker) -> EpochCheck:
    """Ask the broker for the recorded epoch's marker; begin a new epoch when it is gone (or
    when none was ever recorded)."""
    with ledger.store.reading() as reads:
        current = reads.queue_epoch(marker.queue)
    if current is None:
        return _begin(ledger, marker, None)
    present = marker.marker_present(current)
    if present is None or present:
        return EpochCheck(current)
    log.warning(
        "queue %s lost its marker for epoch %s (deleted, re-created or wiped): the jobs "
        "confirmed under it are sent again",
        marker.queue,
        current,
    )
    begun = _begin(ledger, marker, current)
    return EpochCheck(begun.epoch, lost=current if begun.epoch != current else None)


def _begin(ledger: Ledger, marker: QueueMarker, expected: str | None) -> EpochCheck:
    epoch = uuid.uuid4().hex[:16]
    try:
        marker.place_marker(epoch)
    except DispatchError as exc:
        log.warning("queue %s: a new epoch could not be marked now: %s", marker.queue, exc)
        return EpochCheck(expected)  # asked again at the next pass
    with ledger.store.transaction() as tx:
        if tx.set_queue_epoch(marker.queue, expected, epoch, now()):
            return EpochCheck(epoch)
    with ledger.store.reading() as reads:  # another reconciler began one first: that one holds
        return EpochCheck(reads.queue_epoch(marker.queue))


class CachedEpoch:
    """The epoch a process's confirmations are recorded under, read before the publish and
    kept `EPOCH_REFRESH_S`: a message confirmed under an epoch went to the queue that epoch
    marks, or to a later one. None for a dispatcher that marks no queue."""

    def __init__(self, ledger: Ledger, dispatcher: Dispatcher) -> None:
        self.ledger = ledger
        self.dispatcher = dispatcher
        self.queue = dispatcher.queue if isinstance(dispatcher, QueueMarker) else None
        self.last: str | None = None  # the epoch read last (a top-up records under it)
        self._read_at = float("-inf")

    def current(self) -> str | None:
        if self.queue is None:
            return None
        if time.monotonic() - self._read_at < EPOCH_REFRESH_S:
            return self.last
        try:
            with self.ledger.store.reading() as reads:
                self.last = reads.queue_epoch(self.queue)
            if self.last is None and isinstance(self.dispatcher, QueueMarker):
                # The queue's first epoch, begun by whoever publishes first: a message
                # confirmed under no epoch could never be shown lost with its queue.
                self.last = check(self.ledger, self.dispatcher).epoch
            self._read_at = time.monotonic()
        except LedgerError as exc:
            log.debug("outbox: the queue's epoch cannot be read now: %s", exc)
        return self.last

    def forget(self) -> None:
        """Read the epoch again before the next publish (it changed)."""
        self._read_at = float("-inf")

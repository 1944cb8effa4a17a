"""The sequencer's loop (Postgres): run in every reconciler process, led by one of them.

Writers commit without a ledger-wide lock; the leader gives each committed event its ledger
position soon after (`Store.sequence`, one tick). While ticks find events it ticks every
BUSY_TICK_S (and for a second after), and otherwise waits for the next job write's
notification (or IDLE_WAIT_S, for the writes that notify nothing; QUIET_WAIT_S once the ledger
has been quiet for QUIET_AFTER_S). The others bid for the
lead every second, so a leader that dies is replaced. Nothing depends on the loop for
correctness: a reader in ledger order sequences what committed before it first
(`Store.in_order`); the loop keeps that wait, and the lag (`SequencerState.lag_s`), short.

The leader also folds the kept counts' deltas into their totals about once a second
(`Store.compact_counts`): readers are exact without it, and it keeps what they sum small.
"""

from __future__ import annotations

import logging
import threading
import time

from ledger.errors import StorageError
from ledger.persistence.base import SequencerLeader
from ledger.runtime.ledger import Ledger

log = logging.getLogger(__name__)

IDLE_WAIT_S = 0.05  # the longest an event that notifies nothing waits for its position
# While ticks keep finding events, the next comes this long after the last began: a tick
# costs the database about the same for one event as for a hundred, so under load ticks take
# the events of a few milliseconds each instead of racing the writers one commit at a time.
BUSY_TICK_S = 0.005
# Not every write notifies (a submit does not: nobody waits on an id not yet returned), so
# for this long after a tick found events an empty tick is followed by the next within
# BUSY_TICK_S, not IDLE_WAIT_S; an idle ledger's ticks stay 20 a second.
BUSY_SPELL_S = 1.0
# A ledger quiet this long waits QUIET_WAIT_S between empty ticks instead: an idle deployment's
# leader ticks 4 times a second, not 20 (docs/performance.md, idle CPU). What notifies still
# wakes it at once (an outcome, a claim), and the first of those sequences what waited before it.
QUIET_AFTER_S = 10.0
QUIET_WAIT_S = 0.25
FOLLOW_S = 1.0  # how often a follower bids for the lead
# How often the leader makes the partitions ahead of the writers (Postgres, docs/archive.md):
# a partition holds OUTCOMES_PARTITION_SIZE positions, so this is far more often than needed.
PARTITIONS_EVERY_S = 10.0
RETRY_S = 1.0  # after a failure (the database away)
COMPACT_EVERY_S = 1.0  # how often the leader folds the kept counts' deltas


class SequencerLoop:
    def __init__(
        self,
        ledger: Ledger,
        *,
        idle_wait_s: float = IDLE_WAIT_S,
        busy_tick_s: float = BUSY_TICK_S,
        quiet_wait_s: float = QUIET_WAIT_S,
        partitions_ahead: int = 2,
    ) -> None:
        self.ledger = ledger
        self.partitions_ahead = partitions_ahead
        self._partitioned_at = float("-inf")
        self.idle_wait_s = idle_wait_s
        self.busy_tick_s = busy_tick_s
        self.quiet_wait_s = max(quiet_wait_s, idle_wait_s)
        self._found_at = float("-inf")  # when a tick last found events
        self._compacted_at = float("-inf")  # when the counts' deltas were last folded
        self.stopped = threading.Event()
        self._leader: SequencerLeader | None = ledger.store.sequencer_leader()
        self._thread: threading.Thread | None = None

    @property
    def leading(self) -> bool:
        return self._leader is not None and self._leader.leading

    def start(self) -> None:
        """In a thread of its own; nothing to do on a store that sequences at write."""
        if self._leader is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self.run, name="sequencer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self._leader is not None:
            self._leader.close()

    def run(self) -> None:
        leader = self._leader
        while leader is not None and not self.stopped.is_set():
            try:
                self._step(leader)
            except StorageError as exc:
                log.warning("sequencer: %s; retrying in %.0f s", exc, RETRY_S)
                leader.reset()
                self.stopped.wait(RETRY_S)

    def _compact(self) -> None:
        # On a pooled connection of its own: a failure here is the counts' alone, never a
        # reason to give up the lead.
        try:
            self.ledger.store.compact_counts()
        except StorageError as exc:
            log.warning("sequencer: the counts' deltas were not folded now: %s", exc)

    def _make_partitions(self) -> None:
        try:
            made = self.ledger.store.make_partitions(self.partitions_ahead)
        except StorageError as exc:  # (a lock held long by an archive): the next call makes them
            log.warning("sequencer: partitions ahead not made: %s", exc)
            return
        if made:
            log.info("sequencer: made %d partitions ahead of the writers", made)

    def empty_wait(self, since_found_s: float) -> float:
        """How long an empty tick waits for the next (a notification ends it sooner)."""
        if since_found_s < BUSY_SPELL_S:
            return self.busy_tick_s
        return self.idle_wait_s if since_found_s < QUIET_AFTER_S else self.quiet_wait_s

    def _step(self, leader: SequencerLeader) -> None:
        if not leader.lead():
            self.stopped.wait(FOLLOW_S)
            return
        began = time.monotonic()
        if began - self._compacted_at >= COMPACT_EVERY_S:
            self._compacted_at = began
            self._compact()
        if began - self._partitioned_at >= PARTITIONS_EVERY_S:
            self._partitioned_at = began
            self._make_partitions()
        found = leader.tick()
        if found > 0:
            self._found_at = began
            self.stopped.wait(max(0.0, began + self.busy_tick_s - time.monotonic()))
        elif found == 0:
            leader.wait(self.empty_wait(began - self._found_at))
        elif found < 0:  # a reader's tick was under way: it took what there was
            leader.wait(0.002)

"""The outbox's confirmations, recorded in groups: each publish adds what the broker
confirmed, and one statement (`record_dispatches`) records what gathered, every FLUSH_S on
the recorder's own thread or when the outbox asks (a flush, an inline send, an admission).

It also keeps, for the per-account dispatch window, the messages admitted and not yet
recorded as confirmed: the ledger's count of an account's messages cannot see them until
their record commits, so an admission adds them (`unrecorded_by_account`)."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterable, Sequence

from ledger.errors import LedgerError
from ledger.queueing import Confirmation
from ledger.runtime.backlog import BacklogGauge
from ledger.runtime.ledger import Ledger

log = logging.getLogger(__name__)

FLUSH_S = 0.1  # confirmations gather this long before they are recorded together


class ConfirmationRecords:
    def __init__(self, ledger: Ledger, max_held: int, backlog: BacklogGauge | None = None) -> None:
        self._ledger = ledger
        self._max_held = max_held  # kept for another try while recording fails; beyond, the relay
        self._backlog = backlog  # sampled by the recorder's thread, so no submit waits for it
        self._lock = threading.Lock()
        self._confirmed: list[Confirmation] = []
        self._recording = 0  # records taken and not yet committed (or failed)
        # The recorder's own wake-up, set only to stop it: waiting on the publishers'
        # condition, it could take a send's one notify meant for an idle publisher.
        self._stop = threading.Event()
        # One window admission at a time in this process, and never while a record of
        # confirmations is between its commit and `_unrecorded` (it would count them twice).
        self.admitting = threading.RLock()
        # Admitted to a window and not yet recorded as confirmed (job id: account).
        self._unrecorded: dict[str, str] = {}

    def add(self, confirmations: Sequence[Confirmation]) -> None:
        if confirmations:
            with self._lock:
                self._confirmed.extend(confirmations)

    def run(self) -> None:
        """The recorder's thread: a flush every FLUSH_S, one statement for what gathered."""
        while not self._stop.wait(FLUSH_S):
            self.record_now()
            if self._backlog is not None:  # sampled here once a second (its own pace)
                self._backlog.sample_if_due()

    def stop(self) -> None:
        self._stop.set()

    def record_now(self) -> None:
        self.record(self._take())

    @property
    def idle(self) -> bool:
        """Nothing gathered, and no record between its take and its commit."""
        with self._lock:
            return not self._confirmed and not self._recording

    def counts(self) -> tuple[int, int]:
        """(confirmations gathered and not recorded, records under way)."""
        with self._lock:
            return len(self._confirmed), self._recording

    def unrecorded_by_account(self) -> Counter[str]:
        with self._lock:
            return Counter(self._unrecorded.values())

    def admitted(self, jobs: Iterable[tuple[str, str]]) -> None:
        """These (job id, account) messages were admitted to their accounts' windows."""
        with self._lock:
            self._unrecorded.update((job, account) for job, account in jobs if account)

    def _take(self) -> list[Confirmation]:
        """Counted as recording until `record` is done, so a flush never answers while
        another thread's record is still uncommitted."""
        with self._lock:
            taken, self._confirmed = self._confirmed, []
            if taken:
                self._recording += 1
        return taken

    def record(self, confirmed: list[Confirmation]) -> None:
        if not confirmed:
            return
        try:
            with self.admitting:
                with self._ledger.store.transaction() as tx:
                    tx.record_dispatches(confirmed)
                with self._lock:  # the ledger's count sees them now
                    for confirmation in confirmed:
                        self._unrecorded.pop(confirmation.job_id, None)
        except LedgerError as exc:
            # Kept for the next flush; if this process dies first, the reconciler's relay
            # publishes those jobs once more (harmless: the claim is version-checked).
            log.warning("outbox: recording %d confirmation(s) failed: %s", len(confirmed), exc)
            with self._lock:
                self._confirmed[:0] = confirmed[-self._max_held :]
        finally:
            with self._lock:
                self._recording -= 1

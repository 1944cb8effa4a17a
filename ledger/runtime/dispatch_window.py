"""Fair dispatch: a window of at most `window` messages per account in the broker at once
(`OUTCOMES_ACCOUNT_WINDOW`; docs/fairness.md). One broker queue is first in, first out: an
account that submits 5,000 jobs would put every later account's job behind all of them. With
a window, the account's jobs past it stay accepted in the ledger, unpublished (the decision is
the outbox's record: nothing is lost), and are published as the account's jobs start.

- The deciding process publishes a new job only while its account has room
  (`Admission.admit`, one read per publishing batch); the rest it leaves to the ledger.
- A worker that started jobs tops their accounts up (`top_up`): under the account's lock,
  its queued messages are counted, and its longest-waiting unpublished jobs fill the room,
  published and their confirmations recorded in the same transaction, so two workers topping
  up one account do it one after the other.
- The reconciler's relay tops up every account with unpublished jobs (once a second): the
  window's fallback, as it is the outbox's.

The window is soft: two deciding processes, or one and a top-up, may each see the same room
and overfill it a little. Never the other way: a job is held back only while its account has
at least `window` confirmed messages waiting in the broker, and those are trusted.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from ledger.errors import LedgerError
from ledger.job_view import JobView
from ledger.queueing import Confirmation
from ledger.runtime.ledger import Ledger

log = logging.getLogger(__name__)

WINDOW_LOCK = "dispatch window"
ACCOUNTS_PER_RELAY = 1000

# Publish these waiting jobs now; the confirmations of those the broker took.
Publish = Callable[[Sequence[JobView]], list[Confirmation]]


def admit(
    ledger: Ledger,
    accounts: Sequence[str],
    window: int,
    pending: Mapping[str, int] | None = None,
) -> list[bool]:
    """Which of these new messages (by their jobs' accounts, in order) fit their account's
    window now, counting the `pending` ones (this process's, published and not yet recorded)
    with those the ledger knows. Unknown accounts ("": a message of no account) always fit; so
    does every message when the ledger cannot be read (fail open: the window is fairness, not
    safety)."""
    named = sorted({a for a in accounts if a})
    if not named:
        return [True] * len(accounts)
    try:
        with ledger.store.quick_read() as reads:
            queued = Counter(reads.queued_by_account(named))
        queued.update(pending or {})  # the other accounts' counts are never asked
    except LedgerError as exc:
        log.debug("dispatch window: not read now (%s); publishing all", exc)
        return [True] * len(accounts)
    fits = []
    for account in accounts:
        fits.append(not account or queued[account] < window)
        if account:
            queued[account] += 1
    return fits


def top_up(ledger: Ledger, account: str, window: int, publish: Publish) -> list[str]:
    """Fill the account's window from its longest-waiting unpublished jobs; the ids of those
    confirmed. The account's lock is held from the count to the recorded confirmations."""
    with ledger.store.transaction() as tx:
        tx.lock(WINDOW_LOCK, account)
        room = window - tx.queued_by_account([account]).get(account, 0)
        held = tx.held_jobs(account, room) if room > 0 else []
        if not held:
            return []
        confirmed = publish(held)
        tx.record_dispatches(confirmed)
        return [c.job_id for c in confirmed]


def top_up_all(ledger: Ledger, window: int, publish: Publish) -> list[str]:
    """The relay's way: every account with unpublished waiting jobs, topped up."""
    with ledger.store.reading() as reads:
        accounts = reads.held_accounts(ACCOUNTS_PER_RELAY)
    return [job for account in accounts for job in top_up(ledger, account, window, publish)]


class TopUps:
    """A worker's top-ups, on a thread of their own: the accounts whose jobs just started,
    gathered while the previous round ran (a claim never waits for a publish)."""

    def __init__(
        self,
        ledger: Ledger,
        window: int,
        publish: Publish,
        prepare: Callable[[], object] = lambda: None,
    ) -> None:
        self.ledger = ledger
        self.window = window
        self._publish = publish
        self._prepare = prepare  # before a round, outside its transactions (the queue's epoch)
        self._cond = threading.Condition()
        self._accounts: set[str] = set()
        self._thread: threading.Thread | None = None
        self._stopping = False

    def request(self, accounts: Sequence[str]) -> None:
        with self._cond:
            if self._stopping:
                return
            self._accounts.update(accounts)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="top-ups", daemon=True)
                self._thread.start()
            self._cond.notify()

    def close(self, timeout_s: float = 5.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout_s)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._accounts and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                accounts, self._accounts = sorted(self._accounts), set()
            self._prepare()
            for account in accounts:
                try:
                    top_up(self.ledger, account, self.window, self._publish)
                except LedgerError as exc:  # the relay tops the window up within a second
                    log.warning("dispatch window: topping up %s failed: %s", account, exc)

"""`audit verify` for the console: run in a thread of its own, one at a time, its last result
kept for the audit page. A whole-ledger verification reads every event (seconds to minutes),
so a page never waits for it: it shows the last result and whether a newer one is under way."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime

from ledger.clock import now
from ledger.digest import Digest
from ledger.errors import LedgerError
from ledger.services import audit
from ledger.services.ledger import Ledger

log = logging.getLogger(__name__)
THREAD = "outcomes-console-verify"
FRESH_S = 15 * 60.0  # an audit page opened later than this after the last run starts another


@dataclass(frozen=True)
class VerifyResult:
    started_at: datetime
    finished_at: datetime
    ok: bool
    events_checked: int
    streams_checked: int
    chain_ok: bool
    read_models_ok: bool
    first_problem: str | None
    digest: Digest | None  # taken right after, of the ledger as verified (or a little later)
    error: str | None = None  # the run itself failed (the ledger did not answer)


class Verifier:
    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._lock = threading.Lock()
        self._running_since: datetime | None = None
        self._last: VerifyResult | None = None
        self._last_at = 0.0  # monotonic

    def state(self) -> tuple[VerifyResult | None, datetime | None]:
        """The last result, and when the run under way started (None: none is)."""
        with self._lock:
            return self._last, self._running_since

    def refresh(self, fresh_s: float = FRESH_S) -> None:
        """Start a run unless one is under way or the last one is fresher than `fresh_s`."""
        with self._lock:
            if self._running_since is not None:
                return
            if self._last is not None and time.monotonic() - self._last_at < fresh_s:
                return
            self._running_since = now()
        threading.Thread(target=self._run, name=THREAD, daemon=True).start()

    def _run(self) -> None:
        started = self._running_since or now()
        try:
            found = audit.verify_all(self._ledger)
            digest = audit.take_digest(self._ledger)
            first = found.chain.first_problem
            result = VerifyResult(
                started_at=started,
                finished_at=now(),
                ok=found.ok,
                events_checked=found.chain.events_checked,
                streams_checked=found.chain.streams_checked,
                chain_ok=found.chain.ok,
                read_models_ok=found.read_models.ok,
                first_problem=first.message if first else _read_model_problem(found),
                digest=digest,
            )
        except LedgerError as exc:
            log.warning("console verification failed: %s", type(exc).__name__)
            result = VerifyResult(started, now(), False, 0, 0, False, False, None, None, str(exc))
        with self._lock:
            self._last, self._last_at, self._running_since = result, time.monotonic(), None


def _read_model_problem(found: audit.Verification) -> str | None:
    if found.read_models.ok:
        return None
    return "the stored read models differ from a fold of the events (run outcomes audit verify)"

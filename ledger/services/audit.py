"""Auditors' use cases: query and summarize the ledger, export it, take a digest, verify it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime

from ledger.chain import VerifyReport, verify_chain
from ledger.clock import now
from ledger.digest import Digest
from ledger.events import RecordedEvent
from ledger.queries import EventFilter, JobSummary
from ledger.services.ledger import Ledger

Progress = Callable[[int], None]  # called with the number of events just handled


def events(ledger: Ledger, where: EventFilter) -> list[RecordedEvent]:
    with ledger.store.reading() as reads:
        return reads.find_events(where)


def summary(
    ledger: Ledger,
    account: str | None,
    tool: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> JobSummary:
    with ledger.store.reading() as reads:
        return reads.summarize_jobs(account, tool, since, until)


def size(ledger: Ledger) -> int:
    """The last position: how far an export or a verify will go (for progress bars)."""
    return ledger.store.last_position()


def every_event(ledger: Ledger, progress: Progress | None = None) -> Iterator[RecordedEvent]:
    """Every event in position order, page by page (an export, a verify)."""
    found: Iterator[RecordedEvent] = ledger.store.iter_events()
    return _counting(found, progress) if progress is not None else found


def take_digest(ledger: Ledger) -> Digest:
    """The head of every stream up to the current last position."""
    with ledger.store.reading() as reads:
        seen = reads.heads()
    return Digest(
        created_at=now(),
        position=seen.position,
        events=seen.events,
        heads=seen.heads,
        ledger_hash=seen.ledger_hash,
    )


def verify(
    ledger: Ledger, digest: Digest | None = None, progress: Progress | None = None
) -> VerifyReport:
    """Recompute every hash and link; with a digest, prove the ledger still extends it."""
    return verify_chain(every_event(ledger, progress), digest.checkpoint if digest else None)


def _counting(
    found: Iterator[RecordedEvent], progress: Progress, every: int = 1000
) -> Iterator[RecordedEvent]:
    pending = 0
    for event in found:
        yield event
        pending += 1
        if pending == every:
            progress(pending)
            pending = 0
    if pending:
        progress(pending)

"""Auditors' use cases: query and summarize the ledger, export it, take a digest, verify it."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import takewhile
from pathlib import Path
from typing import Any

from ledger import digest_files
from ledger.chain import DIGEST_KINDS, VerifyReport, verify_chain
from ledger.clock import now
from ledger.digest import Digest
from ledger.events import RecordedEvent
from ledger.order_check import order_findings
from ledger.persistence.base import Reads
from ledger.queries import EventFilter, JobSummary
from ledger.read_model_check import ReadModelReport, Replay
from ledger.read_models import ReadModel
from ledger.services.ledger import Ledger

Progress = Callable[[int], None]  # called with the number of events just handled


def events(ledger: Ledger, where: EventFilter) -> list[RecordedEvent]:
    with ledger.store.in_order() as reads:
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


def status_counts(
    ledger: Ledger,
    account: str | None,
    tool: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> dict[str, int]:
    """`summary`'s counts by status alone (the console's jobs page: read on every refresh)."""
    with ledger.store.quick_read() as reads:
        return reads.count_statuses(account, tool, since, until)


def size(ledger: Ledger) -> int:
    """The last position: how far an export or a verify will go (for progress bars)."""
    return ledger.store.last_position()


def every_event(ledger: Ledger, progress: Progress | None = None) -> Iterator[RecordedEvent]:
    """Every event in position order, page by page (an export, a verify)."""
    found: Iterator[RecordedEvent] = ledger.store.iter_events()
    return _counting(found, progress) if progress is not None else found


@dataclass(frozen=True)
class LedgerHead:
    """The newest event's position, time and ledger-wide link (which binds every event before
    it): what a verification or a digest taken now would cover."""

    position: int
    recorded_at: datetime | None
    ledger_hash: str | None


def head(ledger: Ledger) -> LedgerHead:
    """Two index reads, whatever the ledger's size (the console's audit page)."""
    with ledger.store.in_order() as reads:
        last = reads.last_position()
        found = reads.find_events(EventFilter(after=max(last - 1, 0), limit=1)) if last else []
    if not found:
        return LedgerHead(last, None, None)
    return LedgerHead(found[0].position, found[0].recorded_at, found[0].ledger_hash)


def take_digest(ledger: Ledger) -> Digest:
    """The head of every stream up to the current last position (the sequencer's head, once
    what committed before is sequenced)."""
    with ledger.store.in_order() as reads:
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
    found = every_event(ledger, progress)
    checkpoint = digest.checkpoint if digest else None
    report = verify_chain(found, checkpoint, _dense_from(ledger), ledger.store.archive_base())
    return _with_order_findings(ledger, report)


def _dense_from(ledger: Ledger) -> int | None:
    state = ledger.store.sequencer_state()
    return state.dense_from if state is not None else None


def _with_order_findings(ledger: Ledger, report: VerifyReport) -> VerifyReport:
    found = ledger.store.order_problems()
    if found is not None:
        report.problems.extend(order_findings(found))
    return report


@dataclass(frozen=True)
class DigestCheck:
    """Whether the ledger still extends one published digest."""

    source: Path
    report: VerifyReport  # its DIGEST_* problems alone (the chain's are the main report's)


@dataclass
class Verification:
    """All that `audit verify` proves: the chains (against `--digest`, if given), the read
    models, and every published digest (`--against`)."""

    chain: VerifyReport
    read_models: ReadModelReport
    digests: list[DigestCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.chain.ok and self.read_models.ok and all(d.report.ok for d in self.digests)


def verify_all(
    ledger: Ledger,
    digest: Digest | None = None,
    against: Sequence[tuple[Path, Digest]] = (),
    progress: Progress | None = None,
    page: int = 5000,
) -> Verification:
    """`verify`, and the read models rebuilt in memory from the same events and compared with
    the stored ones, and each published digest checked, all in one snapshot of the ledger."""
    dense_from = _dense_from(ledger)
    archived = ledger.store.archive_base()
    with ledger.store.snapshot() as reads:
        replay = Replay()
        found = _pages(reads, page)
        counted = _counting(found, progress) if progress is not None else found
        checkpoint = digest.checkpoint if digest else None
        # After an archive, the chains go on from where it ends (ledger.archive.ArchiveBase).
        chain = verify_chain(replay.watch(counted), checkpoint, dense_from, archived)
        read_models = replay.compare(lambda model: _stored_rows(reads, model, page))
        digests = [_check_digest(reads, source, d, page) for source, d in against]
    return Verification(_with_order_findings(ledger, chain), read_models, digests)


def load_digests(directory: Path) -> list[tuple[Path, Digest]]:
    """Every digest published in `directory`; one that is not intact is an error naming it."""
    return digest_files.load_all(directory)


def publish_digest(ledger: Ledger, directory: Path) -> tuple[Path, Digest]:
    """Take a digest and write it as a new read-only file in `directory`."""
    taken = take_digest(ledger)
    return digest_files.publish(directory, taken), taken


def _check_digest(reads: Reads, source: Path, digest: Digest, page: int) -> DigestCheck:
    # The checkpoint logic of `--digest`, over the events the digest covers: one read of
    # that span per digest.
    span = takewhile(lambda e: e.position <= digest.position, _pages(reads, page))
    found = verify_chain(span, digest.checkpoint)
    kept = [p for p in found.problems if p.kind in DIGEST_KINDS]
    report = VerifyReport(found.events_checked, found.streams_checked, kept)
    return DigestCheck(source, report)


def _pages(reads: Reads, page: int) -> Iterator[RecordedEvent]:
    after = 0
    while found := reads.find_events(EventFilter(after=after, limit=page)):
        yield from found
        after = found[-1].position


def _stored_rows(reads: Reads, model: ReadModel[Any], page: int) -> Iterator[dict[str, Any]]:
    after: str | None = None
    while rows := reads.read_model_rows(model.table, after, page):
        yield from rows
        after = str(rows[-1][model.key_column])


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

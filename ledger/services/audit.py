"""Auditors' use cases: query and summarize the ledger, export it, take a digest, verify it."""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO

from ledger import digest_files, digest_writer
from ledger.chain import VerifyReport
from ledger.clock import now
from ledger.digest import Digest
from ledger.digest_files import Published
from ledger.digest_writer import DigestSummary
from ledger.events import RecordedEvent
from ledger.queries import EventFilter, JobFilter, JobSummary
from ledger.runtime.ledger import Ledger
from ledger.services.verify_passes import PAGE, Progress, Verification, verify_passes


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


def account_head(ledger: Ledger, account: str) -> LedgerHead:
    """The newest change among one account's jobs (one index read): the head as staff limited
    to that account may see it. The ledger-wide figures (its last position, its link, which
    bind every account's events) are not theirs to read."""
    with ledger.store.quick_read() as reads:
        found = reads.jobs(JobFilter(account=account, limit=1, newest_first=True))
    if not found:
        return LedgerHead(0, None, None)
    return LedgerHead(found[0].ledger_position, found[0].updated_at, None)


def write_digest(ledger: Ledger, out: IO[bytes]) -> DigestSummary:
    """Write the digest of the ledger as it stands (the head of every stream up to the last
    position, once what committed before is sequenced) to `out`, streamed: the heads go from
    the store to the file, none held."""
    with ledger.store.in_order() as reads:
        position = reads.last_position()
        events, link = reads.ledger_span(position)
        heads = reads.digest_heads(position)
        return digest_writer.write_digest(out, now(), position, events, link, heads)


def take_digest(ledger: Ledger) -> Digest:
    """The digest, in memory (O(streams): for tests and small ledgers; commands stream it)."""
    written = io.BytesIO()
    write_digest(ledger, written)
    return Digest.loads(written.getvalue())


def publish_digest(ledger: Ledger, directory: Path) -> tuple[Path, DigestSummary]:
    """Take a digest and write it as a new read-only file in `directory`, streamed."""
    with ledger.store.in_order() as reads:
        position = reads.last_position()
        events, link = reads.ledger_span(position)
        taken_at = now()

        def write(out: IO[bytes]) -> DigestSummary:
            heads = reads.digest_heads(position)
            return digest_writer.write_digest(out, taken_at, position, events, link, heads)

        return digest_files.publish(directory, digest_files.digest_name(taken_at, position), write)


def load_digests(directory: Path) -> list[Published]:
    """Every digest published in `directory`, each known intact (one that is not is an error
    naming it), held without its heads: each is read again when it is checked."""
    return digest_files.check_all(directory)


def load_published(directory: Path) -> digest_files.PublishedDir:
    """Every tree head and per-stream digest published in `directory`, each known intact
    (one that is not is an error naming it); per-stream digests held without their heads."""
    return digest_files.read_dir(directory)


def verify(
    ledger: Ledger, digest: Digest | None = None, progress: Progress | None = None
) -> VerifyReport:
    """Recompute every hash and link; with a digest, prove the ledger still extends it."""
    return verify_passes(ledger, digest, models=False, progress=progress).chain


def verify_all(
    ledger: Ledger,
    digest: Digest | None = None,
    against: Sequence[Published] = (),
    progress: Progress | None = None,
    page: int = PAGE,
) -> Verification:
    """`verify`, and the read models folded from the same events and compared with the stored
    ones, and each published digest checked, all in one snapshot of the ledger
    (`ledger.services.verify_passes`: two passes, bounded memory)."""
    return verify_passes(ledger, digest, against, True, progress, page)


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

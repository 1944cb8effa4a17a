"""Whole-ledger checks for auditors: verify every chain, take and check digests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime

from sqlalchemy import func, select

from ledger.chain import ChainLink, VerifyReport, verify_chain
from ledger.digest import Digest
from ledger.persistence.schema import events
from ledger.persistence.store import EventStore

Progress = Callable[[int], None]  # called with the number of events just checked


def verify_ledger(
    store: EventStore, digest: Digest | None = None, progress: Progress | None = None
) -> VerifyReport:
    """Recompute every hash and link; with a digest, prove the ledger still extends it."""
    links: Iterator[ChainLink] = store.iter_links()
    if progress is not None:
        links = _counting(links, progress)
    return verify_chain(links, digest.checkpoint if digest else None)


def _counting(
    links: Iterator[ChainLink], progress: Progress, every: int = 1000
) -> Iterator[ChainLink]:
    pending = 0
    for link in links:
        yield link
        pending += 1
        if pending == every:
            progress(pending)
            pending = 0
    if pending:
        progress(pending)


def take_digest(store: EventStore) -> Digest:
    """The head of every stream up to the current last position."""
    with store.reading() as conn:
        position = conn.execute(select(func.coalesce(func.max(events.c.position), 0))).scalar_one()
        upto = events.c.position <= position
        last = (
            select(events.c.stream_id, func.max(events.c.stream_version).label("version"))
            .where(upto)
            .group_by(events.c.stream_id)
            .subquery()
        )
        query = select(events.c.stream_id, events.c.stream_version, events.c.hash).join(
            last,
            (events.c.stream_id == last.c.stream_id) & (events.c.stream_version == last.c.version),
        )
        heads = {r.stream_id: (r.stream_version, r.hash) for r in conn.execute(query)}
        count = conn.execute(select(func.count()).select_from(events).where(upto)).scalar_one()
    return Digest(
        created_at=datetime.now(UTC), position=int(position), events=int(count), heads=heads
    )

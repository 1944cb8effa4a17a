"""`audit verify`'s checks without a store. `verify_chain`: both passes over events already in
memory (a test's list, a small export). `verify_in_order`: one pass over events that come in
ledger order (an archive's files, read batch by batch), each stream's chain followed from its
head, so memory holds a head a stream and never the events."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from ledger.archive import ArchiveBase
from ledger.chain import Checkpoint, VerifyReport, link_problems
from ledger.events import RecordedEvent
from ledger.ledger_pass import (
    DensePositions,
    DigestSpan,
    KeptBelowCut,
    LedgerChain,
    LedgerFold,
    OrderCheck,
)
from ledger.problem_log import ProblemLog
from ledger.queries import StreamEvent
from ledger.stream_pass import DigestHeads, StreamChain, StreamPass
from ledger.stream_table import HeadTable, StreamSet


def verify_chain(
    links: Iterable[RecordedEvent],
    checkpoint: Checkpoint | None = None,
    dense_from: int | None = None,
    base: ArchiveBase | None = None,
    continued: Mapping[str, tuple[int, str]] | None = None,
) -> VerifyReport:
    """Check every link (the events in position order); with a checkpoint (from a digest) also
    check that the ledger still extends it: same heads, and nothing added or removed within its
    span. With `dense_from`, positions from there on must follow each other without a gap.
    After an archive (`base`), the chains go on from its end; `continued`: the heads of
    streams whose earlier events are elsewhere (an earlier archive's files)."""
    events = list(links)
    problems = ProblemLog()
    checks: list[OrderCheck] = [LedgerChain(problems, base)]
    if dense_from is not None:
        checks.append(DensePositions(problems, dense_from, base))
    if base is not None:
        checks.append(KeptBelowCut(problems, base))
    if checkpoint is not None:
        checks.append(DigestSpan(problems, checkpoint))
    in_order = LedgerFold(checks)
    in_order.add(events)
    in_order.finish()

    def present(stream_ids: list[str], upto: int | None) -> set[str]:
        wanted = set(stream_ids)
        return {
            e.stream_id
            for e in events
            if e.stream_id in wanted and (upto is None or e.position <= upto)
        }

    chain = StreamChain(problems, continued)
    digest = DigestHeads(problems, checkpoint, present) if checkpoint is not None else None
    by_stream = StreamPass(chain, digest)
    ordered = sorted(events, key=lambda e: (e.stream_id, e.stream_version, e.position))
    by_stream.add(StreamEvent(e, True) for e in ordered)
    by_stream.finish()
    report = problems.report(in_order.events, chain.streams)
    report.first_position, report.last_position = in_order.first_position, in_order.last_position
    return report


class StreamLinks:
    """The stream chain followed in ledger order: each event against its stream's head so far
    (`continued`'s for a stream whose earlier events are elsewhere), the checks of
    `stream_pass.StreamChain`. A stream's events come in version order in ledger order (a
    version is appended once the one before it committed), so the heads are all it holds;
    at the end they are every stream's last (version, hash). The heads of the streams in
    `table` (an archive's job streams, up to millions) are held in its arrays, not in `heads`;
    `table_events` counts their events."""

    def __init__(
        self,
        problems: ProblemLog,
        continued: Mapping[str, tuple[int, str]] | None = None,
        table: StreamSet | None = None,
    ) -> None:
        self.problems = problems
        self.table = table if table is not None else StreamSet()
        self.table_heads = HeadTable()
        self.table_events = 0
        self.heads: dict[str, tuple[int, str]] = {}
        for stream, (version, hash_) in (continued or {}).items():
            number = self.table.index(stream)
            if number >= 0:
                self.table_heads.set(number, version, hash_)
            else:
                self.heads[stream] = (version, hash_)
        self.streams = 0
        self._unmet = set(continued or {})  # continued streams not met yet (counted when met)

    def watch(self, links: Iterable[RecordedEvent]) -> Iterator[RecordedEvent]:
        heads, table, table_heads = self.heads, self.table, self.table_heads
        for link in links:
            stream = link.stream_id
            number = table.index(stream) if len(table) and isinstance(stream, str) else -1
            if number >= 0:
                self.table_events += 1
                head = table_heads.get(number)
            else:
                head = heads.get(stream)
            if head is None:
                self.streams += 1
            elif stream in self._unmet:
                self._unmet.discard(stream)
                self.streams += 1
            self.problems.extend(link_problems(link, head))
            if number >= 0:
                table_heads.set(number, link.stream_version, link.hash)
            else:
                heads[stream] = (link.stream_version, link.hash)
            yield link


def verify_in_order(
    links: Iterable[RecordedEvent],
    dense_from: int | None = None,
    base: ArchiveBase | None = None,
    continued: Mapping[str, tuple[int, str]] | None = None,
    table: StreamSet | None = None,
) -> tuple[VerifyReport, StreamLinks]:
    """`verify_chain`'s checks (with no digest) in one pass over `links`, which come in ledger
    order and are let go as they pass: the report, and the chain followed, whose `heads` are
    every stream's head at the end (`continued`'s for a stream with no event here) but those
    of the streams in `table`, held in its `table_heads`."""
    problems = ProblemLog()
    checks: list[OrderCheck] = [LedgerChain(problems, base)]
    if dense_from is not None:
        checks.append(DensePositions(problems, dense_from, base))
    if base is not None:
        checks.append(KeptBelowCut(problems, base))
    in_order = LedgerFold(checks)
    chain = StreamLinks(problems, continued, table)
    in_order.add(chain.watch(links))
    in_order.finish()
    report = problems.report(in_order.events, chain.streams)
    report.first_position, report.last_position = in_order.first_position, in_order.last_position
    return report, chain

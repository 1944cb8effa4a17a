"""Both passes of `audit verify` over events already in memory (a test's list, a small export):
the same checks the store-backed verification runs, without a store."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ledger.archive import ArchiveBase
from ledger.chain import Checkpoint, VerifyReport
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

"""`audit verify` over a store, in bounded memory: two passes in one snapshot of the ledger.

1. **Ledger order** (`ledger.ledger_pass`): the events by position, their place and hashes
   only, a page at a time: the ledger-wide chain, the dense positions, each digest's span, and
   the Merkle tree recomputed from every event's hash against its stored nodes and recorded
   heads (`ledger.tree_pass`). Its state is a few values and a frontier (O(log n) hashes).
2. **Stream order** (`ledger.stream_pass`): every stream's events together, a page at a time
   by the store's unique index on (stream, version): each event's hash recomputed and its link
   to the stream's previous one, the `--digest`'s heads looked up by key, and the read models
   folded one stream at a time and compared by key with the stored rows, a batch at a time.
   The rows no event makes the database finds (`rows_without_events`): only they come back.

Then each published digest (`--against`) is read again, one at a time, and its heads checked
in one more pass in stream order over the events' places and hashes. What the passes hold:
a page of events, one stream's views, a batch of rows, the problems kept (`ProblemLog`), and
the digest being checked (the digest itself: O(its streams)).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ledger.chain import Checkpoint, VerifyReport
from ledger.clock import now
from ledger.digest import Digest
from ledger.digest_files import Published
from ledger.ledger_pass import (
    DensePositions,
    DigestSpan,
    KeptBelowCut,
    LedgerChain,
    LedgerFold,
    OrderCheck,
)
from ledger.merkle import Frontier
from ledger.order_check import order_findings
from ledger.persistence.base import Reads
from ledger.problem_log import ProblemLog
from ledger.read_model_check import ReadModelReport, StreamModels
from ledger.read_models import READ_MODELS, ReadModel
from ledger.runtime.ledger import Ledger
from ledger.stream_pass import DigestHeads, StreamChain, StreamPass
from ledger.tree_pass import TreeLeaves

Progress = Callable[[int], None]  # called with the number of events just handled
PAGE = 2000  # events a page, in either order


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
    started_at: datetime | None = None
    finished_at: datetime | None = None
    scope: str | None = None  # None: the whole ledger; else what was checked (`--since`, …)

    @property
    def ok(self) -> bool:
        return self.chain.ok and self.read_models.ok and all(d.report.ok for d in self.digests)


def passes(against: int) -> int:
    """How many times a verification reads the events (for a progress bar's length): ledger
    order, stream order, and once more for each published digest."""
    return 2 + against


def verify_passes(
    ledger: Ledger,
    digest: Digest | None = None,
    against: Sequence[Published] = (),
    models: bool = True,
    progress: Progress | None = None,
    page: int = PAGE,
) -> Verification:
    started = now()
    state = ledger.store.sequencer_state()
    dense_from = state.dense_from if state is not None else None
    tell = progress or (lambda n: None)
    # After an archive, the chains go on from where it ends (ledger.archive.ArchiveBase).
    base = ledger.store.archive_base()
    with ledger.store.snapshot() as reads:
        problems = ProblemLog()
        spans = [ProblemLog() for _ in against]
        checks: list[OrderCheck] = [LedgerChain(problems, base)]
        if dense_from is not None:
            checks.append(DensePositions(problems, dense_from, base))
        if base is not None:
            checks.append(KeptBelowCut(problems, base))
        if digest is not None:
            checks.append(DigestSpan(problems, digest.checkpoint))
        if base is None:
            checks.append(tree_check(reads, problems))
        elif base.tree is not None:  # the archived leaves are in its files: go on from them
            checks.append(tree_check(reads, problems, base.tree, base.position + 1))
        checks.extend(DigestSpan(log, p.span) for log, p in zip(spans, against, strict=True))
        in_order = _ledger_order(reads, LedgerFold(checks), page, tell)

        chain = StreamChain(problems)
        heads = None
        if digest is not None:
            heads = DigestHeads(problems, digest.checkpoint, reads.streams_present)
        folded = StreamModels(_rows_by_key(reads), page) if models else None
        _stream_order(reads, StreamPass(chain, heads, folded), page, tell)
        read_models = _extra_rows(reads, folded, page) if folded else ReadModelReport()
        digests = [
            _check_published(reads, p, log, page, tell)
            for p, log in zip(against, spans, strict=True)
        ]
    report = problems.report(in_order.events, chain.streams)
    report.first_position, report.last_position = in_order.first_position, in_order.last_position
    found = ledger.store.order_problems()
    if found is not None:  # after the chain's, as they were always listed
        report.problems.extend(order_findings(found))
    return Verification(report, read_models, digests, started, now())


def tree_check(
    reads: Reads,
    problems: ProblemLog,
    start: Frontier | None = None,
    first_position: int | None = None,
) -> OrderCheck:
    """The whole tree recomputed in the ledger-order pass, from the tree's first position (or,
    after an archive, from its manifest's frontier at its end, from the position after it)."""
    return TreeLeaves(
        problems,
        reads.tree_state(),
        reads.tree_hashes(),
        reads.recorded_tree_heads(),
        start=start or Frontier.empty(),
        first_position=first_position,
    )


def _ledger_order(reads: Reads, fold: LedgerFold, page: int, tell: Progress) -> LedgerFold:
    after = 0
    while links := reads.ledger_links(after, page):
        fold.add(links)
        after = links[-1].position
        tell(len(links))
    fold.finish()
    return fold


def _stream_order(reads: Reads, by_stream: StreamPass, page: int, tell: Progress) -> None:
    while found := reads.events_by_stream(_cursor(by_stream), page):
        by_stream.add(found)
        tell(len(found))
    by_stream.finish()


def _cursor(by_stream: StreamPass) -> tuple[str, int] | None:
    last = by_stream.last
    return None if last is None else (last.event.stream_id, last.event.stream_version)


def _rows_by_key(reads: Reads) -> Callable[[ReadModel[Any], list[str]], list[dict[str, Any]]]:
    def stored(model: ReadModel[Any], keys: list[str]) -> list[dict[str, Any]]:
        return reads.read_model_rows_by_key(model.table, keys)

    return stored


def _extra_rows(reads: Reads, folded: StreamModels, page: int) -> ReadModelReport:
    """The rows no event makes (the database's set difference), and every table's count."""
    for model in READ_MODELS:
        after: str | None = None
        while keys := reads.rows_without_events(model.table, after, page):
            for key in keys:
                folded.extra(model.table, key)
            after = keys[-1]
        folded.report.rows_checked[model.table] = reads.count_rows(model.table)
    return folded.report


def _check_published(
    reads: Reads, published: Published, span: ProblemLog, page: int, tell: Progress
) -> DigestCheck:
    """One published digest, read whole again (one at a time), its heads against the
    streams; its span was checked in the ledger-order pass (`span`)."""
    digest = published.load()
    checkpoint = Checkpoint(digest.heads, published.position, published.events)
    heads = DigestHeads(span, checkpoint, reads.streams_present, whole=False)
    after: tuple[str, int] | None = None
    while links := reads.links_by_stream(after, page):
        for link in links:
            heads.add(link)
        after = (links[-1].stream_id, links[-1].stream_version)
        tell(len(links))
    heads.finish()
    return DigestCheck(published.path, span.report(digest.events, len(digest.heads)))

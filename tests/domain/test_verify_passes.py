"""The pieces of `audit verify` and `audit digest` that hold a bounded window: the problem log
(the lowest positions kept, the rest counted), the streamed digest (byte for byte the digest
`Digest.dumps` makes, its root included), and a digest's heads checked in stream order (the
streams it names that never came by found by asking, not by keeping a set)."""

from __future__ import annotations

import io
from datetime import UTC, datetime

import pytest

from ledger.chain import Checkpoint, Problem, ProblemKind
from ledger.digest import Digest
from ledger.digest_writer import write_digest
from ledger.errors import DigestError
from ledger.problem_log import ProblemLog
from ledger.queries import LedgerLink
from ledger.stream_pass import DigestHeads

NOW = datetime(2026, 12, 1, 8, 30, tzinfo=UTC)


def problem(kind: ProblemKind, position: int | None) -> Problem:
    return Problem(kind, "s", 1, position, f"{kind} at {position}")


def test_the_log_keeps_the_lowest_positions_and_counts_the_rest() -> None:
    log = ProblemLog(keep=3)
    for position in (50, 7, 30, 9, 8, 100):
        log.add(problem(ProblemKind.HASH_MISMATCH, position))
    log.add(problem(ProblemKind.DIGEST_COUNT, None))
    report = log.report(events=100, streams=10)
    assert [p.position for p in report.problems] == [7, 8, 9, None]
    assert (report.problems_total, report.more, report.ok) == (7, 3, False)
    assert report.first_problem is not None and report.first_problem.position == 7


def test_at_one_position_the_stream_chain_comes_before_the_ledger_chain() -> None:
    """The two passes find them in either order; they are listed as one pass named them."""
    log = ProblemLog()
    log.add(problem(ProblemKind.LEDGER_CHAIN_BROKEN, 5))  # the ledger-order pass, first
    log.add(problem(ProblemKind.POSITION_GAP, 5))
    log.add(problem(ProblemKind.DIGEST_EXTRA, 5))
    log.add(problem(ProblemKind.HASH_MISMATCH, 5))  # the stream-order pass, later
    log.add(problem(ProblemKind.CHAIN_BROKEN, 3))
    assert [(p.kind, p.position) for p in log.problems()] == [
        (ProblemKind.CHAIN_BROKEN, 3),
        (ProblemKind.HASH_MISMATCH, 5),
        (ProblemKind.LEDGER_CHAIN_BROKEN, 5),
        (ProblemKind.POSITION_GAP, 5),
        (ProblemKind.DIGEST_EXTRA, 5),
    ]


HEADS = {
    "brake-1": (2, "cd" * 32),
    "job-a": (3, "ab" * 32),
    "job-b": (1, "ef" * 32),
    "token-é": (1, "01" * 32),  # beyond ASCII: code-point order, as the root hashes it
}


@pytest.mark.parametrize("heads", [{}, {"job-a": HEADS["job-a"]}, HEADS])
@pytest.mark.parametrize("ledger_hash", [None, "12" * 32])
def test_a_streamed_digest_is_the_digest_byte_for_byte(
    heads: dict[str, tuple[int, str]], ledger_hash: str | None
) -> None:
    whole = Digest(NOW, position=9, events=12, heads=dict(heads), ledger_hash=ledger_hash)
    out = io.BytesIO()
    rows = sorted((s, v, h) for s, (v, h) in heads.items())
    summary = write_digest(out, NOW, 9, 12, ledger_hash, iter(rows))
    assert out.getvalue() == whole.dumps()
    assert (summary.root, summary.streams) == (whole.root, len(heads))
    assert Digest.loads(out.getvalue()) == whole


def test_a_streamed_digest_refuses_heads_out_of_order() -> None:
    rows = [("job-b", 1, "ef" * 32), ("job-a", 3, "ab" * 32)]
    with pytest.raises(DigestError, match="out of order"):
        write_digest(io.BytesIO(), NOW, 4, 4, None, iter(rows))


def link(stream: str, version: int, position: int, hash_: str) -> LedgerLink:
    return LedgerLink(position, stream, version, hash_, None)


def test_a_digests_heads_in_stream_order() -> None:
    asked: list[tuple[list[str], int | None]] = []

    def present(names: list[str], upto: int | None) -> set[str]:
        asked.append((names, upto))
        return {"brake-1", "job-a", "job-c"} & set(names)  # the streams the ledger holds

    checkpoint = Checkpoint(heads=HEADS, position=10, events=7)
    log = ProblemLog()
    heads = DigestHeads(log, checkpoint, present)
    for item in [
        link("brake-0", 1, 12, "x"),  # after the span, a stream the digest never named
        link("brake-1", 1, 1, "x"),  # brake-1 ends at 1: the digest saw 2 (truncated)
        link("job-a", 1, 2, "x"),
        link("job-a", 2, 3, "x"),
        link("job-a", 3, 4, "f" * 64),  # its head, another hash (rewritten)
        link("job-c", 1, 5, "x"),  # a stream the digest never named, within its span
        link("job-c", 2, 11, "x"),  # after the span: newer history
    ]:
        heads.add(item)
    heads.finish()
    assert sorted((p.kind.value, p.stream_id, p.position) for p in log.problems()) == [
        ("digest_extra", "job-c", 5),
        ("digest_mismatch", "job-a", 4),
        ("digest_truncated", "brake-1", None),
        ("digest_truncated", "job-b", None),  # never came by: asked, and not there
        ("digest_truncated", "token-é", None),
    ]
    assert asked == [(sorted(HEADS), None)]  # asked once, about the digest's own streams


def test_a_published_digests_heads_count_its_span_alone() -> None:
    """`--against`: a stream whose events all came after the digest's span is cut as far as
    that digest goes, and named once (by asking the store with the same span)."""
    checkpoint = Checkpoint(heads={"job-a": (1, "ab" * 32)}, position=5, events=1)
    log = ProblemLog()

    def present(names: list[str], upto: int | None) -> set[str]:
        assert upto == 5
        return set()  # job-a holds no event at or below position 5 any more

    heads = DigestHeads(log, checkpoint, present, whole=False)
    heads.add(link("job-a", 1, 9, "ab" * 32))  # re-appended after the span
    heads.finish()
    assert [(p.kind, p.stream_id) for p in log.problems()] == [
        (ProblemKind.DIGEST_TRUNCATED, "job-a")
    ]

"""The checks of one event against the chains: a stream's links, the ledger-wide link and
dense positions, a digest's heads and span, and the events kept below an archive
(`ledger.chain`; `audit verify` runs them in its passes)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from ledger.archive import ArchiveBase
from ledger.chain_hash import ledger_link, recomputed_hash
from ledger.chain_problems import Checkpoint, Problem, ProblemKind
from ledger.events import RecordedEvent


class Link(Protocol):
    """An event's place and hashes: a `RecordedEvent`, or the ledger-order pass's narrow
    `LedgerLink`."""

    @property
    def position(self) -> int: ...
    @property
    def stream_id(self) -> str: ...
    @property
    def stream_version(self) -> int: ...
    @property
    def hash(self) -> str: ...
    @property
    def ledger_hash(self) -> str | None: ...


def kept_problem(link: Link, base: ArchiveBase) -> Problem | None:
    """An event kept below the newest archive's end (a stream that is not a job's): one the
    archive saw, with the hash it saw at the stream's head there."""
    expected = base.kept_heads.get(link.stream_id)
    if expected is not None and link.stream_version <= expected[0]:
        if link.stream_version == expected[0] and link.hash != expected[1]:
            return _kept_problem(link, "its hash differs from the archive's")
        return None
    return _kept_problem(link, "the archive saw no such event below its end")


def kept_whole_problems(base: ArchiveBase, kept: int, versions: Mapping[str, int]) -> list[Problem]:
    """As many kept events below the cut as the archive left, and no kept stream ending
    before the version the archive saw (`versions`: each kept stream's last version seen)."""
    found = []
    if kept != base.kept_events:
        found.append(
            Problem(
                ProblemKind.ARCHIVE_KEPT,
                "",
                0,
                None,
                f"positions up to {base.position} (archive {base.archive_id}) hold {kept} "
                f"events of kept streams; the archive left {base.kept_events}",
            )
        )
    for stream_id, (version, _) in base.kept_heads.items():
        seen = versions.get(stream_id, 0)
        if seen < version:
            found.append(
                Problem(
                    ProblemKind.ARCHIVE_KEPT,
                    stream_id,
                    version,
                    None,
                    f"{stream_id} ends at version {seen}; archive {base.archive_id} saw it at "
                    f"version {version}",
                )
            )
    return found


def _kept_problem(link: Link, what: str) -> Problem:
    return Problem(
        ProblemKind.ARCHIVE_KEPT,
        link.stream_id,
        link.stream_version,
        link.position,
        f"{link.stream_id} v{link.stream_version} (position {link.position}): kept below the "
        f"newest archive's end, but {what}",
    )


def stream_links(stream: Iterable[RecordedEvent]) -> list[tuple[RecordedEvent, list[Problem]]]:
    """Each event of one stream (in version order) with its own link's problems: its hash
    recomputed and its prev_hash against the event before it. The ledger-wide link needs the
    neighbouring positions of other streams, so only the ledger-order pass sees it."""
    found: list[tuple[RecordedEvent, list[Problem]]] = []
    head: tuple[int, str] | None = None
    for link in stream:
        found.append((link, link_problems(link, head)))
        head = (link.stream_version, link.hash)
    return found


def _where(link: Link) -> str:
    return f"{link.stream_id} v{link.stream_version} (position {link.position})"


def link_problems(link: RecordedEvent, head: tuple[int, str] | None) -> list[Problem]:
    """The stream chain at one event: its version follows `head` (the stream's previous
    event), its prev_hash is that event's hash, and its content still makes its hash."""
    found: list[Problem] = []
    prev_version, prev_hash = head if head else (0, None)
    where = _where(link)
    if link.stream_version != prev_version + 1:
        found.append(
            Problem(
                ProblemKind.VERSION_GAP,
                link.stream_id,
                link.stream_version,
                link.position,
                f"{where}: follows version {prev_version}; an event is missing",
            )
        )
    elif link.prev_hash != prev_hash:
        found.append(
            Problem(
                ProblemKind.CHAIN_BROKEN,
                link.stream_id,
                link.stream_version,
                link.position,
                f"{where}: prev_hash does not match the previous event's hash",
            )
        )
    if recomputed_hash(link) != link.hash:
        found.append(
            Problem(
                ProblemKind.HASH_MISMATCH,
                link.stream_id,
                link.stream_version,
                link.position,
                f"{where}: content does not match its hash (edited)",
            )
        )
    return found


def dense_problem(link: Link, previous: int) -> Problem | None:
    """Positions from the sequencer's first are dense: this one must follow `previous`."""
    if link.position == previous + 1:
        return None
    return Problem(
        ProblemKind.POSITION_GAP,
        link.stream_id,
        link.stream_version,
        link.position,
        f"{_where(link)}: positions {previous + 1}..{link.position - 1} are missing (the "
        "sequencer gives them without a gap: an order row was deleted)",
    )


def ledger_link_problem(link: Link, prev: str | None) -> Problem | None:
    """The ledger-wide chain at one position: its link follows the previous position's."""
    if link.ledger_hash == ledger_link(prev, link.hash):
        return None
    return Problem(
        ProblemKind.LEDGER_CHAIN_BROKEN,
        link.stream_id,
        link.stream_version,
        link.position,
        f"{_where(link)}: the ledger-wide chain breaks here: an event before it was "
        "deleted, inserted or moved, or this one was",
    )


def digest_event_problem(link: Link, expected: tuple[int, str] | None) -> Problem | None:
    """An event within a digest's span against the head the digest saw of its stream."""
    if expected is None or link.stream_version > expected[0]:
        # Inside the digest's span, yet the digest never saw it: inserted afterwards.
        return Problem(
            ProblemKind.DIGEST_EXTRA,
            link.stream_id,
            link.stream_version,
            link.position,
            f"{_where(link)}: not in the digest although within its span (inserted later)",
        )
    if expected[0] == link.stream_version and expected[1] != link.hash:
        return Problem(
            ProblemKind.DIGEST_MISMATCH,
            link.stream_id,
            link.stream_version,
            link.position,
            f"{_where(link)}: hash differs from the digest (history rewritten)",
        )
    return None


def digest_span_problems(
    checkpoint: Checkpoint, within: int, at_checkpoint: str | None
) -> list[Problem]:
    """What the ledger-order pass says of a digest's span: the same ledger-wide link at its
    position, and as many events within it."""
    found: list[Problem] = []
    if checkpoint.ledger_hash not in (None, at_checkpoint):
        found.append(
            Problem(
                ProblemKind.DIGEST_LEDGER_MISMATCH,
                "",
                0,
                None,
                f"the ledger up to position {checkpoint.position} is not the one the "
                "digest saw (its ledger-wide hash differs: events were cut, inserted or "
                "rewritten)",
            )
        )
    if within != checkpoint.events:
        found.append(
            Problem(
                ProblemKind.DIGEST_COUNT,
                "",
                0,
                None,
                f"positions up to {checkpoint.position} hold {within} events; "
                f"the digest saw {checkpoint.events}",
            )
        )
    return found


def digest_truncated(stream_id: str, version: int, seen: int) -> Problem:
    return Problem(
        ProblemKind.DIGEST_TRUNCATED,
        stream_id,
        version,
        None,
        f"{stream_id} ends at version {seen}; the digest saw version {version}",
    )

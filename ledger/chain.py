"""The hash chains: canonical encoding, hashing and verification (contract §2).

Two chains, checked together:
- per stream: each event's hash covers its identity, place, content and the previous hash in
  the same stream, so an edited row, or a deleted one inside a stream, breaks it there;
- ledger-wide: each event's `ledger_hash` links its hash to the previous position's
  `ledger_hash`, so a deleted event anywhere (a stream's newest included, as long as any
  event follows it), an inserted or a reordered one breaks the chain at the next position.
A history re-hashed end to end is consistent with itself, and so is a ledger cut at its very
end; only a digest saved earlier (see `ledger.digest`) exposes those.

The checks of one event are here; `audit verify` runs them in two passes over the ledger
(`ledger.ledger_pass`: ledger order; `ledger.stream_pass`: stream order), in bounded memory.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

import orjson

from ledger.archive import ArchiveBase
from ledger.clock import format_time
from ledger.errors import InvalidEventError
from ledger.events import NewEvent, RecordedEvent


def normalize_data(data: Mapping[str, Any]) -> dict[str, Any]:
    """JSON round trip: what is hashed is exactly what the database gives back."""
    try:
        encoded = orjson.dumps(data)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise InvalidEventError(f"event data is not JSON: {exc}") from None
    if b"\\u0000" in encoded:  # neither database stores NUL in text
        raise InvalidEventError("event data contains a NUL character")
    normal: dict[str, Any] = orjson.loads(encoded)
    return normal


def canonical_bytes(
    *,
    event_id: str,
    stream_id: str,
    stream_version: int,
    type: str,
    data: Mapping[str, Any],
    code: str | None,
    actor: str,
    recorded_at: datetime,
    prev_hash: str | None,
) -> bytes:
    """The bytes an event's `hash` is the SHA-256 of: its nine fields as one JSON object, keys
    sorted, no whitespace, UTF-8 (orjson), the time as `format_time` writes it."""
    return orjson.dumps(
        {
            "event_id": event_id,
            "stream_id": stream_id,
            "stream_version": stream_version,
            "type": type,
            "data": data,
            "code": code,
            "actor": actor,
            "recorded_at": format_time(recorded_at),
            "prev_hash": prev_hash,
        },
        option=orjson.OPT_SORT_KEYS,
    )


def event_hash(
    *,
    event_id: str,
    stream_id: str,
    stream_version: int,
    type: str,
    data: Mapping[str, Any],
    code: str | None,
    actor: str,
    recorded_at: datetime,
    prev_hash: str | None,
) -> str:
    canonical = canonical_bytes(
        event_id=event_id,
        stream_id=stream_id,
        stream_version=stream_version,
        type=type,
        data=data,
        code=code,
        actor=actor,
        recorded_at=recorded_at,
        prev_hash=prev_hash,
    )
    return hashlib.sha256(canonical).hexdigest()


def recorded_canonical_bytes(event: RecordedEvent) -> bytes:
    """A recorded event's canonical bytes, recomputed from its row as it reads now."""
    return canonical_bytes(
        event_id=str(event.event_id),
        stream_id=event.stream_id,
        stream_version=event.stream_version,
        type=event.type,
        data=event.data,
        code=event.code,
        actor=event.actor,
        recorded_at=event.recorded_at,
        prev_hash=event.prev_hash,
    )


def recomputed_hash(event: RecordedEvent) -> str:
    """The hash a recorded event's content makes now (its `hash` if nobody edited it)."""
    return hashlib.sha256(recorded_canonical_bytes(event)).hexdigest()


def ledger_link(prev_ledger_hash: str | None, event_hash: str) -> str:
    """The ledger-wide link of an event (migration 0005 computes the same in SQL)."""
    return hashlib.sha256(f"{prev_ledger_hash or ''}:{event_hash}".encode()).hexdigest()


def link_rows(prev_ledger_hash: str | None, rows: Sequence[dict[str, Any]]) -> str | None:
    """Fill each sealed row's `ledger_hash`, in order, after `prev_ledger_hash` (for stores
    that compute it themselves); returns the last one."""
    for row in rows:
        prev_ledger_hash = row["ledger_hash"] = ledger_link(prev_ledger_hash, row["hash"])
    return prev_ledger_hash


def event_rows(
    stream_id: str,
    new_events: Sequence[NewEvent],
    version: int,
    prev_hash: str | None,
    recorded_at: datetime,
) -> list[dict[str, Any]]:
    """The rows that record `new_events` after `version`: every column but the position,
    each hash chained to the one before. Every store records exactly these."""
    rows = []
    for offset, new in enumerate(new_events, start=1):
        payload = new.payload
        fields: dict[str, Any] = {
            "stream_id": stream_id,
            "stream_version": version + offset,
            "event_id": new.event_id,
            "type": payload.type,
            "data": normalize_data(payload.model_dump(mode="json")),
            "code": payload.code.value if payload.code else None,
            "actor": new.actor,
            "recorded_at": recorded_at,
            "prev_hash": prev_hash,
        }
        fields["hash"] = event_hash(**(fields | {"event_id": str(new.event_id)}))
        prev_hash = fields["hash"]
        rows.append(fields)
    return rows


class ProblemKind(StrEnum):
    HASH_MISMATCH = "hash_mismatch"  # the row's content no longer matches its hash
    CHAIN_BROKEN = "chain_broken"  # prev_hash is not the previous event's hash
    VERSION_GAP = "version_gap"  # a version is missing before this one (deleted row)
    DIGEST_MISMATCH = "digest_mismatch"  # the event a digest names has another hash now
    DIGEST_TRUNCATED = "digest_truncated"  # a stream ends before the version a digest names
    DIGEST_EXTRA = "digest_extra"  # an event within the digest's span that it did not see
    DIGEST_COUNT = "digest_count"  # the digest's span holds another number of events now
    LEDGER_CHAIN_BROKEN = "ledger_chain_broken"  # an event before this position was removed,
    # inserted or moved: its ledger_hash does not follow from the previous position's
    DIGEST_LEDGER_MISMATCH = "digest_ledger_mismatch"  # the ledger up to the digest's position
    # is not the ledger the digest saw
    # Ledger order (Postgres, where a sequencer gives positions after commit):
    POSITION_GAP = "position_gap"  # a ledger position is missing before this one (dense since
    # the sequencer began)
    UNSEQUENCED = "unsequenced"  # a committed event the sequencer passed has no ledger position
    ORDER_ORPHANED = "order_orphaned"  # a ledger position whose event is gone
    ORDER_DUPLICATED = "order_duplicated"  # an event holds more than one ledger position
    # Archives (ledger.archive):
    ARCHIVE_KEPT = "archive_kept"  # the events kept below an archive's end are not those it saw
    ARCHIVE_FILE = "archive_file"  # an archive's file is missing, altered or not what it says
    ARCHIVE_MANIFEST = "archive_manifest"  # a manifest that disagrees with its files or the last
    # The Merkle tree (ledger.tree_pass): a stored subtree, a recorded tree head or the current
    # head is not the tree recomputed from the events' rows.
    MERKLE_MISMATCH = "merkle_mismatch"
    # A tree head kept apart (`verify --since`, a head in `--against`) that the current tree
    # does not extend: the stored tree at its size has another root, or its position is not
    # the leaf it says.
    TREE_HEAD_MISMATCH = "tree_head_mismatch"


# What only a digest can reveal (the rest are the chains' own findings).
DIGEST_KINDS = frozenset(
    {
        ProblemKind.DIGEST_MISMATCH,
        ProblemKind.DIGEST_TRUNCATED,
        ProblemKind.DIGEST_EXTRA,
        ProblemKind.DIGEST_COUNT,
        ProblemKind.DIGEST_LEDGER_MISMATCH,
    }
)


@dataclass(frozen=True)
class Problem:
    kind: ProblemKind
    stream_id: str
    stream_version: int
    position: int | None
    message: str


@dataclass
class VerifyReport:
    events_checked: int = 0
    streams_checked: int = 0
    problems: list[Problem] = field(default_factory=list)
    more: int = 0  # problems found beyond those kept (`ledger.problem_log`): counted only
    first_position: int | None = None  # the range the ledger-order pass read (None: empty)
    last_position: int | None = None

    @property
    def ok(self) -> bool:
        return not self.problems and not self.more

    @property
    def problems_total(self) -> int:
        return len(self.problems) + self.more

    @property
    def first_problem(self) -> Problem | None:
        """The problem at the lowest position (a truncation has none, so it comes last)."""
        located = [p for p in self.problems if p.position is not None]
        if located:
            return min(located, key=lambda p: p.position or 0)
        return self.problems[0] if self.problems else None


@dataclass(frozen=True)
class Checkpoint:
    """What a digest saw: each stream's head, the last position and how many events."""

    heads: Mapping[str, tuple[int, str]]
    position: int
    events: int
    ledger_hash: str | None = None  # the ledger-wide link at `position` (older digests: None)


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

"""Archives: what an archive is (docs/archive.md), with no file format and no storage here.

An archive takes the oldest ranges of write positions out of the database, whole: every event
written in them, in ledger order, goes to files (`ledger.archive_files`), with the archived
jobs' read-model rows and a manifest. The ranges must end at a clean cut, so that the events
archived are a prefix of the ledger order, and every job with an event in them must have
ended with all its events inside them. Job streams leave the database; the other streams
(tokens, brakes, webhooks) are copied into the files and kept in the database, whole, because
authentication, the brake checks and their appends read them from their events: their heads at
the cut (`checkpoints`) bind what the database kept to what the archive saw.

The manifest is versioned (`MANIFEST_VERSION`) and keeps any member it does not know, so a
later version may add some and an older reader still reads the ones it knows: `tree` (added
within version 1) holds the Merkle tree's frontier before the archive's first leaf and after its
last, so that its files are checked against the tree, and the database's tree check goes on
from where the archive ends. Its own SHA-256 is the next archive's
`previous.manifest_sha256`: archives chain.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

import orjson
from pydantic import BaseModel, ConfigDict, Field

from ledger.errors import ArchiveError, ProofError
from ledger.merkle import Frontier

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "outcomes-archive"
MANIFEST_VERSION = 1
JOB_STREAM_PREFIX = "job-"  # ledger.events.job_stream: the streams an archive takes away


def is_job_stream(stream_id: str) -> bool:
    return stream_id.startswith(JOB_STREAM_PREFIX)


def archive_folder_name(archive_id: int) -> str:
    """Each archive's files live in a folder of their own, named by its number."""
    return f"{archive_id:06d}"


# --- the manifest ----------------------------------------------------------------------------


class _Open(BaseModel):
    # Members a later version adds are kept, read back and written again as they were.
    model_config = ConfigDict(extra="allow", frozen=True)


class StreamHead(_Open):
    version: int
    hash: str


class ArchiveFile(_Open):
    name: str
    kind: str  # "events" (one per archived range) or "jobs" (the archived jobs' rows)
    rows: int
    sha256: str
    write_from: int | None = None  # an events file's range of write positions, [from, to)
    write_to: int | None = None


class PreviousArchive(_Open):
    archive_id: int
    manifest_sha256: str


class ArchiveCounts(_Open):
    events: int  # every event in the files
    job_events: int  # of them, the job streams' (they left the database)
    kept_events: int  # the other streams' (copied, and kept in the database)
    kept_total: int = 0  # kept events at or below ledger_last, this archive's and the earlier
    jobs: int
    jobs_by_status: dict[str, int] = Field(default_factory=dict)


class TreeSpan(_Open):
    """The Merkle tree around an archive's events (docs/integrity.md, "Proofs"): the leaves
    are the events from ledger position `start_position` on; `before` is the tree's frontier
    before the archive's first leaf (the previous archive's `after`; the empty tree for the
    first), `after` its frontier at the archive's last leaf, read from the stored tree when the
    archive was made. Each in `Frontier.to_json`'s form."""

    start_position: int
    before: dict[str, object]
    after: dict[str, object]

    def frontiers(self) -> tuple[Frontier, Frontier]:
        """`before` and `after`, checked (`ProofError` if either is not a sound frontier)."""
        return Frontier.from_json(self.before), Frontier.from_json(self.after)


class Manifest(_Open):
    format: str = MANIFEST_FORMAT
    version: int = MANIFEST_VERSION
    archive_id: int
    created_at: datetime
    previous: PreviousArchive | None
    write_from: int  # write positions [write_from, write_to)
    write_to: int
    ledger_first: int | None  # ledger positions [first, last], a prefix of the ledger order
    ledger_last: int | None
    ledger_hash_before: str | None  # the ledger-wide link at ledger_first - 1 (None: none)
    ledger_hash_last: str | None  # … at ledger_last: binds every event up to it
    dense_from: int | None = None  # ledger positions are dense from here (the sequencer's)
    counts: ArchiveCounts
    streams_before: dict[str, StreamHead] = Field(default_factory=dict)  # kept streams' heads
    checkpoints: dict[str, StreamHead] = Field(default_factory=dict)  # at the previous and this cut
    files: list[ArchiveFile]
    tree: TreeSpan | None = None  # None: made before archives carried it, or no leaf in it

    def dumps(self) -> bytes:
        """The manifest's bytes, as written (sorted keys, indented for people)."""
        data = self.model_dump(mode="json", exclude_none=False)
        return orjson.dumps(data, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"

    @classmethod
    def loads(cls, raw: bytes, where: str = "manifest") -> Manifest:
        try:
            found = cls.model_validate_json(raw)
        except ValueError as exc:
            raise ArchiveError(f"{where} is not an archive manifest: {_first_line(exc)}") from None
        if found.format != MANIFEST_FORMAT:
            raise ArchiveError(f"{where} is not an archive manifest (format {found.format!r})")
        if found.version > MANIFEST_VERSION:
            raise ArchiveError(
                f"{where} is version {found.version}; this release reads up to "
                f"{MANIFEST_VERSION}: upgrade to verify it"
            )
        return found

    def kept_heads(self) -> dict[str, tuple[int, str]]:
        return {stream: (head.version, head.hash) for stream, head in self.checkpoints.items()}


def manifest_sha256(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


# --- what the database keeps of its archives --------------------------------------------------


@dataclass(frozen=True)
class ArchiveBase:
    """Where the database's ledger begins after its newest archive: `audit verify` of the
    database picks the chains up here. Ledger positions up to `position` are archived; of the
    events there, the database kept `kept_events` (the streams that are not jobs, whole), whose
    heads at the cut were `kept_heads`; the ledger-wide chain goes on from `ledger_hash`."""

    archive_id: int
    position: int
    ledger_hash: str | None
    write_to: int
    kept_events: int
    kept_heads: Mapping[str, tuple[int, str]] = field(default_factory=dict)
    tree: Frontier | None = None  # the Merkle tree's frontier at `position` (its manifest's)


@dataclass(frozen=True)
class ArchiveRecord:
    """An archive as the database records it (`archives`)."""

    archive_id: int
    state: str  # RECORDED, then DONE
    created_at: datetime
    write_from: int
    write_to: int
    ledger_first: int | None
    ledger_last: int | None
    ledger_hash: str | None
    events: int
    jobs: int
    manifest_sha256: str
    manifest: bytes

    def parsed(self) -> Manifest:
        return Manifest.loads(self.manifest, f"the manifest of archive {self.archive_id}")

    def base(self) -> ArchiveBase:
        found = self.parsed()
        return ArchiveBase(
            archive_id=self.archive_id,
            position=found.ledger_last or 0,
            ledger_hash=found.ledger_hash_last,
            write_to=found.write_to,
            kept_events=found.counts.kept_total,
            kept_heads=found.kept_heads(),
            tree=_tree_after(found, self.archive_id),
        )


def _tree_after(manifest: Manifest, archive_id: int) -> Frontier | None:
    if manifest.tree is None:
        return None
    try:
        return manifest.tree.frontiers()[1]
    except ProofError as exc:
        raise ArchiveError(
            f"the manifest of archive {archive_id}: its tree frontier is not sound: {exc}"
        ) from None


RECORDED = "recorded"  # files written and read back, jobs listed: the rows may now go
DONE = "done"  # the rows left the database


@dataclass(frozen=True)
class ArchivedJob:
    """A job the database no longer holds: which account's, and when it was archived."""

    job_id: str
    account: str
    archive_id: int
    archived_at: datetime


@dataclass(frozen=True)
class CutFacts:
    """What the database says of ending an archive before write position `upper`."""

    upper: int
    clean: bool  # the events written below `upper` are a prefix of the ledger order
    unsequenced: int  # events written below `upper` the sequencer has not placed yet
    ledger_last: int | None  # their highest ledger position
    reason: str | None = None


@dataclass(frozen=True)
class ArchiveRange:
    """A range of write positions [lower, upper) that may be archived (a partition)."""

    lower: int
    upper: int
    events: int
    newest: datetime | None  # the newest event's recording time (None: empty)

"""What a verification finds and reports: each kind of problem, a problem, the report of a
run and a digest's checkpoint (`ledger.chain`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


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

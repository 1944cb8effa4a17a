"""The ledger's failures that are not a caller's request: the base `LedgerError`, settings
and events it cannot take, writers' conflicts, the database's failures, and what archives,
digests, proofs, rebuilds, secrets, the broker and outcome writes raise (the tree:
`ledger.errors`)."""

from __future__ import annotations


class LedgerError(Exception):
    """Base of every error the ledger raises on purpose."""


class ConfigurationError(LedgerError):
    """A setting is missing or malformed (bad URL, unknown scheme, bad value)."""


class InvalidEventError(LedgerError):
    """An event's data cannot be recorded as given (bad shape, NUL bytes, not JSON)."""


class UnsafeTextError(InvalidEventError):
    """A tool name or idempotency key holding a control, bidirectional or zero-width character
    (`ledger.identifiers`): the message names it by code point, never echoes the text."""


# --- the ledger moved under a writer ----------------------------------------------------------


class ConflictError(LedgerError):
    """A write lost a race or repeats one; nothing was recorded by it."""


class ConcurrencyError(ConflictError):
    """Another writer appended to the stream first: the expected version is stale."""

    def __init__(self, stream_id: str, expected: int | None, actual: int | None) -> None:
        super().__init__(f"stream {stream_id!r}: expected version {expected}, found {actual}")
        self.stream_id = stream_id
        self.expected = expected
        self.actual = actual


class AlreadyTerminalError(ConflictError):
    """The job already has its one terminal outcome; a second one is refused."""

    def __init__(self, stream_id: str) -> None:
        super().__init__(f"stream {stream_id!r} already has a terminal event")
        self.stream_id = stream_id


class DuplicateEventError(ConflictError):
    """An event with this event id was already recorded (a retried write that had landed)."""

    def __init__(self, event_id: str) -> None:
        super().__init__(f"event {event_id} is already recorded")
        self.event_id = event_id


class IdempotencyKeyTakenError(ConflictError):
    """Another job of this account already holds the idempotency key."""


class ContentionError(ConflictError):
    """Concurrent writers kept colliding on the same key; nothing was recorded. Retry."""


# --- the database -----------------------------------------------------------------------------


class StorageError(LedgerError):
    """Any other database failure, translated (the driver's first line is kept as the message)."""


class StorageUnavailableError(StorageError):
    """The database could not be reached or dropped the connection; the write did not commit
    or its fate is unknown. Safe to retry with the same event ids."""


class ImmutableLedgerError(StorageError):
    """Something tried to update, delete or truncate recorded events."""


class NoPartitionError(StorageError):
    """A write found no partition for its position (Postgres): the partitions ahead of the
    writers ran out. `outcomes migrate`, or the reconciler's sequencer loop, makes more."""


class SchemaMissingError(StorageError):
    """The ledger's tables do not exist: run `outcomes migrate`."""


class TamperedLeafError(StorageError):
    """A job's outcome cannot be proven because its event row is not what the Merkle tree
    holds (edited after it was hashed into the tree): the ledger refuses to prove it, and
    `outcomes audit verify` names the row."""

    def __init__(self, job_id: str, position: int | None, why: str) -> None:
        super().__init__(f"job {job_id}'s outcome (ledger position {position}): {why}")
        self.job_id = job_id
        self.position = position


class SubtreeMissingError(StorageError):
    """The stored Merkle tree lacks a subtree hash that a tree of the size asked for holds:
    the size is beyond what was appended, or a stored hash was lost (`ledger.merkle_store`)."""

    def __init__(self, level: int, start: int, stop: int, found: int) -> None:
        super().__init__(
            f"the stored Merkle tree holds {found} of the {stop - start} subtree hashes "
            f"{start}..{stop - 1} at level {level}"
        )
        self.level = level


# --- archives, digests, proofs, rebuilds, secrets, the broker ------------------------------------


class ArchiveError(LedgerError):
    """An archive that cannot be made, read or found as asked (a file that is not one, a
    directory with no archive, an archive the database does not know)."""


class ArchiveRefusedError(ArchiveError):
    """Nothing may be archived yet: the message names why (the job not yet terminal, the
    position where the ledger order is not cut clean, nothing old enough)."""


class ArchiveUnsupportedError(ArchiveError):
    """This store keeps no archives (the memory store: it has nothing to keep)."""


class DigestError(LedgerError):
    """A digest file is unreadable or not a ledger digest."""


class ProofError(LedgerError):
    """A Merkle proof, tree head, frontier or hash that is not well formed (`ledger.merkle`,
    `ledger.merkle_verify`): a size out of range, an index outside its tree, a hash that is
    not 32 bytes (64 lowercase hex digits), a path of the wrong length. A well-formed proof
    whose hashes do not add up is no error: its verification answers False."""


class TreeHeadError(ProofError):
    """A tree head given to check the ledger against (`audit verify --since FILE`, a head in
    `--against DIR`) that cannot be used: not a tree head at all, a frontier that does not add
    up to its root, or a head the ledger cannot be checked from (larger than the current
    tree, older than its newest archive)."""


class HeadAheadError(TreeHeadError):
    """A tree head larger than the ledger's current tree: events it covered are gone from
    the tree (removed, or the head is another ledger's)."""

    def __init__(self, head_size: int, tree_size: int) -> None:
        self.head_size = head_size
        self.tree_size = tree_size
        super().__init__(
            f"the head covers {head_size} leaves but the ledger's tree holds only {tree_size}: "
            "events it covered were removed, or it is another ledger's head"
        )


class RebuildTakenOverError(LedgerError):
    """Another `outcomes rebuild` took over the rebuild this one was doing (it resumes where
    this one stopped); this one stops."""


class SecretUnavailableError(LedgerError):
    """A declared secret argument that this process cannot open: its key is not loaded, the
    sealed value was altered or moved, or it was withheld (never sealed: no key at submit)."""

    def __init__(self, message: str, missing_key: str | None = None) -> None:
        super().__init__(message)
        self.missing_key = missing_key


class DispatchError(LedgerError):
    """The job id could not be handed to the broker (the reconciler will try again)."""


class OutcomeUnrecordedError(LedgerError):
    """The tool ran but its outcome could not be written within the budget."""

    def __init__(self, job_id: str, event_type: str) -> None:
        super().__init__(f"job {job_id}: {event_type} could not be recorded; the ledger is down")
        self.job_id = job_id

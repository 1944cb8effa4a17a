"""The ledger's one exception tree: every exception class the project raises on purpose.

Driver errors (psycopg, sqlite3, SQLAlchemy) are translated into these once, by SQLSTATE and
constraint name, in `ledger.persistence.errors`; nothing above the persistence layer sees a
driver type.

    LedgerError
    ├── ConfigurationError          a setting is missing or malformed
    ├── InvalidEventError           data the ledger cannot record
    │   └── UnsafeTextError             a name or key with control, bidi or zero-width characters
    ├── ConflictError               the ledger moved under a writer
    │   ├── ConcurrencyError            stale expected version
    │   ├── AlreadyTerminalError        a second terminal outcome
    │   ├── DuplicateEventError         an event id recorded before
    │   ├── IdempotencyKeyTakenError    a concurrent submit holds the key
    │   └── ContentionError             collisions did not settle; retry
    ├── StorageError                any other database failure
    │   ├── StorageUnavailableError     unreachable or dropped: safe to retry
    │   ├── ImmutableLedgerError        an UPDATE/DELETE/TRUNCATE of events
    │   ├── NoPartitionError            a write past the last partition (Postgres)
    │   ├── SchemaMissingError          run `outcomes migrate`
    │   └── SubtreeMissingError         a Merkle subtree hash the stored tree should hold
    ├── RequestError                a caller's request that cannot be honoured
    │   ├── IdempotencyConflictError    same key, another body
    │   ├── InvalidScopeError           a brake scope that does not parse
    │   ├── BrakeNotFoundError          unknown or released brake
    │   ├── TokenError                  bad account/role, unknown token
    │   ├── NotAuthenticatedError       no valid token
    │   ├── JobNotFoundError            unknown job, or not this caller's
    │   │   ├── JobArchivedError            the caller's job, archived (410)
    │   │   └── TurnNotFoundError           no call of the caller's account in this turn
    │   ├── NotCancellableError         a cancel of a job that already started or ended
    │   ├── NotDecidableError           an approval decision on a job not awaiting one
    │   ├── SelfApprovalError           the token that submitted a job deciding its approval
    │   ├── NotAnAgentError             a token that may read but not submit jobs
    │   ├── ToolNotGrantedError         a tool-limited token acting on another tool's job
    │   ├── InvalidCursorError          a changes-feed cursor this ledger did not issue
    │   ├── NotASecretError             a place in a job's arguments that holds no secret
    │   └── RateLimitedError            an account submitting faster than its rate
    ├── ArchiveError                an archive that cannot be made, read or found as asked
    │   ├── ArchiveRefusedError         nothing may be archived yet (names the job or the cut)
    │   └── ArchiveUnsupportedError     a store that keeps no archives (memory)
    ├── DigestError                 a digest file that is not one
    ├── ProofError                  a Merkle proof, tree head or frontier that is not one
    │   └── TreeHeadError               a tree head the ledger cannot be checked against
    │       └── HeadAheadError              a head larger than the current tree
    ├── SecretUnavailableError      a sealed secret argument this process cannot open
    ├── DispatchError               the broker refused a job id
    └── OutcomeUnrecordedError      the tool ran; its outcome could not be written

Outside the tree, because they are not failures of the ledger:
- `ToolFailure`: a tool's deliberate, typed failure (tool authors raise it; re-exported by
  `ledger.outcomes`, where the tool authors' API names it);
- `BrakeEngaged`, `DeadlineExceeded`: how a running tool is stopped;
- `AwaitableReturned`: a tool declared `def` returned a coroutine (recorded `TOOL_CRASHED`);
- `JobStreamError`: a job stream out of the contract's order (a bug, never user input).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ledger.codes import TOOL_FAILURE_CODES, Code
from ledger.error_info import ErrorInfo


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


# --- requests the ledger will not honour ------------------------------------------------------


class RequestError(LedgerError):
    """A caller asked for something that cannot be done as asked; nothing was recorded."""


class IdempotencyConflictError(RequestError):
    """The idempotency key was used before with another request body."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"idempotency key already used for job {job_id} with another body")
        self.job_id = job_id


class InvalidScopeError(RequestError):
    """A brake scope that is not `global`, `tool:<name>` or `account:<id>`."""


class BrakeNotFoundError(RequestError):
    """No brake with this id, or it is already released."""


class TokenError(RequestError):
    """A token request that cannot be honoured (bad account, role, or unknown token)."""


class NotAuthenticatedError(RequestError):
    """No token, or one that does not exist or is revoked (callers are not told which).
    `presented`: whether a token was presented at all (RFC 6750: a wrong one is
    `error="invalid_token"`, a missing one no error code)."""

    def __init__(self, presented: bool = True) -> None:
        super().__init__("no valid token")
        self.presented = presented


class JobNotFoundError(RequestError):
    """No such job for this caller: unknown ids and other accounts' ids are the same answer."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"no job {job_id}")
        self.job_id = job_id


class TurnNotFoundError(JobNotFoundError):
    """No call of this account names this turn (docs/turns.md): an unknown turn and another
    account's answer the same."""


class JobArchivedError(JobNotFoundError):
    """The caller's own job, archived out of the database (`outcomes archive`): its events
    and view are in the archive's files. Another account's archived job is a plain
    JobNotFoundError, as an unknown id is."""

    def __init__(self, job_id: str, archive_id: int, archived_at: datetime) -> None:
        super().__init__(job_id)
        self.args = (f"job {job_id} was archived at {archived_at.isoformat()}",)
        self.archive_id = archive_id
        self.archived_at = archived_at


class JobNotEndedError(RequestError):
    """A proof of a job's outcome was asked for a job that has none yet (it has not ended, or
    its outcome is not sequenced into the Merkle tree yet): ask again once it has ended."""

    def __init__(self, job_id: str, why: str = "it has not ended") -> None:
        super().__init__(f"job {job_id} has no outcome to prove: {why}")
        self.job_id = job_id


class NotCancellableError(RequestError):
    """Only a job no worker has started (queued, or waiting for its retry) can be cancelled;
    this one is running or has ended, and was left as it is. `envelope` is its envelope as
    the cancel found it (JSON), for the caller to read what it does now."""

    def __init__(self, job_id: str, status: str, envelope: dict[str, Any]) -> None:
        super().__init__(f"job {job_id} is {status}: only a job not yet started can be cancelled")
        self.job_id = job_id
        self.status = status
        self.envelope = envelope


class NotDecidableError(RequestError):
    """An approval decision on a job that is not awaiting one (docs/approvals.md): decided
    before (`cause` that decision), cancelled, expired, or never parked. Nothing was changed;
    `envelope` is the job's envelope, its `approval` the first decision."""

    def __init__(self, job_id: str, cause: str, envelope: dict[str, Any]) -> None:
        super().__init__(f"job {job_id} is not awaiting approval ({cause})")
        self.job_id = job_id
        self.cause = cause
        self.envelope = envelope


class SelfApprovalError(RequestError):
    """The token that submitted a parked job may not decide its approval."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"the token that submitted job {job_id} cannot decide its approval")
        self.job_id = job_id


class NotAnAgentError(RequestError):
    """Only an agent token of one account submits jobs (operators and auditors read)."""

    def __init__(self) -> None:
        super().__init__("jobs are submitted with an agent token of one account")


class ToolNotGrantedError(RequestError):
    """A token limited to some tools acting beyond them: cancelling another tool's job."""

    def __init__(self, tool: str, granted: frozenset[str]) -> None:
        super().__init__(
            f"this token may act on jobs of {', '.join(sorted(granted)) or 'no tool'} only, "
            f"not of {tool}"
        )
        self.tool = tool
        self.granted = granted


class InvalidCursorError(RequestError):
    """A changes-feed cursor that this ledger did not issue (or that was altered)."""

    def __init__(self) -> None:
        super().__init__("not a cursor this ledger issued")


class NotASecretError(RequestError):
    """The job holds no sealed secret at that place of its arguments."""

    def __init__(self, job_id: str, path: str, paths: list[str]) -> None:
        known = ", ".join(paths) or "none"
        super().__init__(f"job {job_id} holds no sealed secret at {path!r} (its secrets: {known})")


# --- the rest ---------------------------------------------------------------------------------


class WebhookTargetError(RequestError):
    """A webhook URL the ledger will not deliver to: not http(s), unresolvable, or resolving to
    this host, loopback, link-local or a private range (docs/webhooks.md, SSRF)."""


class WebhookLimitError(RequestError):
    """An account already has as many webhooks (not removed) as a deployment allows
    (OUTCOMES_MAX_WEBHOOKS_PER_ACCOUNT): another is refused until one is removed."""

    def __init__(self, account: str, limit: int) -> None:
        super().__init__(f"account {account} already has {limit} webhooks, the most allowed")
        self.account = account
        self.limit = limit


class WebhookNotFoundError(RequestError):
    """No webhook with this id for this caller (another account's is the same answer)."""

    def __init__(self, webhook_id: str) -> None:
        super().__init__(f"no webhook {webhook_id}")
        self.webhook_id = webhook_id


class WebhookUnavailableError(LedgerError):
    """Webhooks need the secrets key (their signing secrets are sealed under it): this
    process has none (OUTCOMES_SECRETS_KEY)."""


class WebhookSendError(LedgerError):
    """A delivery attempt got no HTTP answer (refused, timed out, no route, TLS)."""


class RateLimitedError(RequestError):
    """A submit over its account's rate (`ledger.fairness`): nothing was recorded. `error` is
    the refusal's `QUOTA_EXCEEDED` (cause `rate_limit`, with `retry_after_s`)."""

    def __init__(self, error: ErrorInfo) -> None:
        super().__init__(error.message)
        self.error = error


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


# --- not ledger failures ----------------------------------------------------------------------


class ToolFailure(Exception):
    """A deliberate, typed failure: what broke, and what would unblock it.

    `fingerprint` identifies the dependency's state (config or credentials version): two
    consecutive failures with the same fingerprint stop the retries.
    """

    def __init__(
        self,
        *,
        code: Code | str,
        dependency: str,
        operation: str,
        retryable: bool = False,
        required_capability: str | None = None,
        safe_fallback: str | None = None,
        fix: str | None = None,
        message: str,
        fingerprint: str | None = None,
        retry_after_s: int | None = None,
    ) -> None:
        self.code = Code(code)
        if self.code not in TOOL_FAILURE_CODES and self.code is not Code.QUOTA_EXCEEDED:
            raise ValueError(f"a tool may not raise the ledger's own code {self.code}")
        super().__init__(f"{self.code}: {message}")
        self.dependency = dependency
        self.operation = operation
        self.retryable = retryable
        self.required_capability = required_capability
        self.safe_fallback = safe_fallback
        self.fix = fix
        self.message = message
        self.fingerprint = fingerprint
        self.retry_after_s = retry_after_s

    def error_info(self) -> ErrorInfo:
        return ErrorInfo(
            code=self.code,
            dependency=self.dependency,
            operation=self.operation,
            retryable=self.retryable,
            required_capability=self.required_capability,
            safe_fallback=self.safe_fallback,
            fix=self.fix,
            message=self.message,
            retry_after_s=self.retry_after_s,
        )


class BrakeEngaged(Exception):
    """A brake was pulled while the tool ran; stop between steps (or return a Partial)."""

    def __init__(self, error: ErrorInfo) -> None:
        super().__init__(error.message)
        self.error = error


class DeadlineExceeded(Exception):
    """The tool ran past its `timeout_s`."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(f"the tool ran past its {timeout_s:g} s deadline")
        self.timeout_s = timeout_s


class AwaitableReturned(Exception):
    """A tool returned an awaitable (a `def` returning a coroutine, an `async def` that forgot an
    `await`): its work never ran to an outcome, so it is a failure, never a success."""

    def __init__(self, returned: str) -> None:
        super().__init__(f"the tool returned {returned} instead of an outcome (never awaited)")
        self.returned = returned


class JobStreamError(ValueError):
    """A job stream whose events are out of the contract's order (a bug, never user input)."""

"""The ledger's one exception tree: every exception class the project raises on purpose,
declared in `errors_core` (the ledger's own failures), `errors_request` (a caller's request
refused) and `errors_tool` (outside the tree), and gathered here: import them from here.

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

from ledger.errors_core import (
    AlreadyTerminalError,
    ArchiveError,
    ArchiveRefusedError,
    ArchiveUnsupportedError,
    ConcurrencyError,
    ConfigurationError,
    ConflictError,
    ContentionError,
    DigestError,
    DispatchError,
    DuplicateEventError,
    HeadAheadError,
    IdempotencyKeyTakenError,
    ImmutableLedgerError,
    InvalidEventError,
    LedgerError,
    NoPartitionError,
    OutcomeUnrecordedError,
    ProofError,
    RebuildTakenOverError,
    SchemaMissingError,
    SecretUnavailableError,
    StorageError,
    StorageUnavailableError,
    SubtreeMissingError,
    TamperedLeafError,
    TreeHeadError,
    UnsafeTextError,
)
from ledger.errors_request import (
    BrakeNotFoundError,
    IdempotencyConflictError,
    InvalidCursorError,
    InvalidScopeError,
    JobArchivedError,
    JobNotEndedError,
    JobNotFoundError,
    NotAnAgentError,
    NotASecretError,
    NotAuthenticatedError,
    NotCancellableError,
    NotDecidableError,
    RateLimitedError,
    RequestError,
    SelfApprovalError,
    TokenError,
    ToolNotGrantedError,
    TurnNotFoundError,
    WebhookLimitError,
    WebhookNotFoundError,
    WebhookSendError,
    WebhookTargetError,
    WebhookUnavailableError,
)
from ledger.errors_tool import (
    AwaitableReturned,
    BrakeEngaged,
    DeadlineExceeded,
    JobStreamError,
    ToolFailure,
)

__all__ = [
    "AlreadyTerminalError",
    "ArchiveError",
    "ArchiveRefusedError",
    "ArchiveUnsupportedError",
    "AwaitableReturned",
    "BrakeEngaged",
    "BrakeNotFoundError",
    "ConcurrencyError",
    "ConfigurationError",
    "ConflictError",
    "ContentionError",
    "DeadlineExceeded",
    "DigestError",
    "DispatchError",
    "DuplicateEventError",
    "HeadAheadError",
    "IdempotencyConflictError",
    "IdempotencyKeyTakenError",
    "ImmutableLedgerError",
    "InvalidCursorError",
    "InvalidEventError",
    "InvalidScopeError",
    "JobArchivedError",
    "JobNotEndedError",
    "JobNotFoundError",
    "JobStreamError",
    "LedgerError",
    "NoPartitionError",
    "NotASecretError",
    "NotAnAgentError",
    "NotAuthenticatedError",
    "NotCancellableError",
    "NotDecidableError",
    "OutcomeUnrecordedError",
    "ProofError",
    "RateLimitedError",
    "RebuildTakenOverError",
    "RequestError",
    "SchemaMissingError",
    "SecretUnavailableError",
    "SelfApprovalError",
    "StorageError",
    "StorageUnavailableError",
    "SubtreeMissingError",
    "TamperedLeafError",
    "TokenError",
    "ToolFailure",
    "ToolNotGrantedError",
    "TreeHeadError",
    "TurnNotFoundError",
    "UnsafeTextError",
    "WebhookLimitError",
    "WebhookNotFoundError",
    "WebhookSendError",
    "WebhookTargetError",
    "WebhookUnavailableError",
]

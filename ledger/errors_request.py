"""Requests the ledger will not honour (`RequestError` and its kinds), and the failures of
webhooks and submit rates (the tree: `ledger.errors`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ledger.error_info import ErrorInfo
from ledger.errors_core import LedgerError

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


# --- webhooks and rates ----------------------------------------------------------------------


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

"""Cancel a call that has not started (docs/cancel.md): a queued job, or one waiting for its
retry, ends declined on purpose (`work.declined` with `cancelled`), nothing ran.

The cancel is appended after the version it read, like a worker's claim: whichever of the two
commits first wins and the other one's append finds the stream moved. A cancel that loses
reads the job again, finds it running and refuses (`NotCancellableError`); a claim that loses
is skipped by its worker, whose message is then acknowledged and dropped unrun. A job already
cancelled answers as the first cancel did.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledger import event_log, identifiers
from ledger.access import ALL_ACCOUNTS, may_see
from ledger.codes import Code, Status
from ledger.error_info import ErrorInfo, sentence
from ledger.errors import (
    ContentionError,
    InvalidEventError,
    JobNotFoundError,
    NotCancellableError,
    ToolNotGrantedError,
)
from ledger.events import Cancellation, NewEvent, WorkDeclined
from ledger.job_view import JobView, envelope
from ledger.persistence.appends import AppendStatus, JobAppend
from ledger.runtime.ledger import Ledger
from ledger.scrub import scrub
from ledger.services.jobs import job_key
from ledger.token_view import TokenView

CANCEL_ROLES = ("agent", "operator")  # auditors read; they change nothing
# No worker holds these; a parked call (awaiting approval) was never even dispatched.
CANCELLABLE = frozenset({Status.AWAITING_APPROVAL, Status.QUEUED, Status.RETRYING})
MAX_REASON_CHARS = 500
# A cancel re-reads when the stream moved under it; a job that keeps moving (a redelivery's
# claim that loses, a re-dispatch) settles within a few reads.
_TRIES = 5


@dataclass(frozen=True)
class Canceller:
    """Who cancels: an account (`*`: every account), a role, and the event's actor."""

    account: str
    role: str
    actor: str  # the token's id, or the operator's name at the command line
    at_cli: bool = False
    tools: frozenset[str] | None = None  # a token limited to these tools cancels their jobs

    @classmethod
    def of_token(cls, token: TokenView) -> Canceller:
        tools = None if token.tools is None else frozenset(token.tools)
        return cls(token.account, token.role, token.token_id, tools=tools)

    @classmethod
    def operator(cls, name: str) -> Canceller:
        """The operator at the database (`outcomes jobs cancel`): every account."""
        return cls(ALL_ACCOUNTS, "operator", name, at_cli=True)

    def describe(self) -> str:
        if self.at_cli:
            return f"operator {self.actor} at the command line"
        of = "every account" if self.account == ALL_ACCOUNTS else f"account {self.account}"
        return f"an {self.role} token of {of}"


def checked_reason(reason: str | None) -> str | None:
    """The caller's reason as it will be recorded: at most MAX_REASON_CHARS, no control,
    bidirectional or zero-width character (InvalidEventError naming it), credential shapes
    scrubbed (it stays in the ledger for good)."""
    if reason is None or not reason.strip():
        return None
    if len(reason) > MAX_REASON_CHARS:
        raise InvalidEventError(f"the cancel reason is longer than {MAX_REASON_CHARS} characters")
    identifiers.check("the cancel reason", reason)
    return scrub(reason.strip(), limit=MAX_REASON_CHARS)


def cancel(ledger: Ledger, job_id: str, by: Canceller, reason: str | None = None) -> JobView:
    """Cancel the job if no worker has started it; the job's view after the cancel.

    JobNotFoundError: unknown, or another account's. ToolNotGrantedError: a job of a tool
    the token is not limited to (it reads it, it does not cancel it). NotCancellableError:
    running or ended (nothing was changed; it carries the job's envelope). A job cancelled
    before answers its view again, whoever asks and whatever the reason."""
    key = job_key(job_id)
    if key is None:
        raise JobNotFoundError(job_id)
    said = checked_reason(reason)
    for _ in range(_TRIES):
        with ledger.store.transaction() as tx:
            view = tx.job(key)
            if view is None or not may_see(by.account, view.account):
                raise JobNotFoundError(job_id)
            if by.tools is not None and view.tool not in by.tools:
                raise ToolNotGrantedError(view.tool, by.tools)
            if view.cancelled is not None:
                return view  # idempotent: the first cancel's answer
            if view.status not in CANCELLABLE:
                shown = envelope(view).model_dump(mode="json")
                raise NotCancellableError(key, view.status.value, shown)
            payload = _declined(view, by, said)
            event = NewEvent(payload=payload, actor=by.actor)
            done = tx.append_jobs([JobAppend(key, [event], view)])[0]
        if done.status is AppendStatus.OK:
            event_log.outcome(view, payload, None)
            return done.job
        # CONFLICT or TERMINAL: a claim (or another cancel) committed first; read again.
    raise ContentionError(f"job {key} kept changing while it was being cancelled")


def _declined(view: JobView, by: Canceller, reason: str | None) -> WorkDeclined:
    why = f": {reason}" if reason else ""
    text = sentence(f"Cancelled by {by.describe()} before any worker started it{why}")
    return WorkDeclined(
        attempt=view.attempts,
        reason=f"{text} Nothing ran.",
        cancelled=Cancellation(account=by.account, role=by.role, reason=reason),
    )


def refusal(status: str, wait: str, read: str) -> ErrorInfo:
    """The typed error of a refused cancel (NOT_CANCELLABLE, `cause` the job's status). Its
    `fix` says, in the adapter's words, what to do instead: for a running job, `wait` for its
    outcome; for an ended one, `read` the outcome it already has and act on its next_action
    (nothing more will happen to it)."""
    if Status(status).terminal:
        fix = (
            f"it has already ended ({status}): read its outcome ({read}) and act on its "
            "next_action; a cancel cannot undo it"
        )
    else:
        fix = f"{wait}; only a job no worker has started can be cancelled"
    return ErrorInfo(
        code=Code.NOT_CANCELLABLE,
        dependency="ledger",
        operation="cancel the job",
        fix=fix,
        message=f"The job is {status}, so it cannot be cancelled; nothing was changed.",
        cause=status,
    )

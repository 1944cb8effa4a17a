"""People in the loop (docs/approvals.md): the calls parked for a person's approval, and that
person's decision.

A tool that asks for approval (`@tool(approval=True)`, or `approval=fn` naming a reason) has
its calls recorded `awaiting_approval` once every refuse-early check passed (the args, the
token's access, the quota, the brake, the backlog): a call that would be refused is refused,
never parked. A parked call is not dispatched. An approver (or an operator) decides it:

- approved: `job.approval_decided` (approved); the job is `queued` and dispatched as any
  accepted job; the brake is re-checked when a worker claims it, as always;
- denied: `job.approval_decided` (denied) and, in the same append, its outcome `work.halted`
  (ACCESS_DENIED, cause `approval_denied`): refused, nothing ran;
- nobody decides before `expires_at`: the reconciler records `work.halted` (DEADLINE_EXCEEDED,
  cause `approval_expired`; `ledger.reconcile_rules`).

Each decision is appended after the stream version it read, as a cancel and a worker's claim
are: of two decisions (or a decision and a cancel, or an expiry) the first to commit wins and
the other reads the job again and answers `NotDecidableError` with the first decision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ledger import event_log, identifiers
from ledger.access import may_see
from ledger.approvals import denied_outcome
from ledger.codes import Status
from ledger.dispatch import Dispatcher
from ledger.errors import (
    ContentionError,
    InvalidEventError,
    JobNotFoundError,
    NotDecidableError,
    SelfApprovalError,
)
from ledger.events import JobApprovalDecided, NewEvent
from ledger.job_view import JobView, envelope
from ledger.persistence.appends import AppendStatus, JobAppend
from ledger.queries import JobFilter
from ledger.runtime.ledger import Ledger
from ledger.runtime.outbox import Outbox, outbox_for
from ledger.scrub import scrub
from ledger.services.jobs import job_key
from ledger.token_view import TokenView

APPROVAL_ROLES = ("approver", "operator")  # agents and auditors never decide
MAX_REASON_CHARS = 500
MAX_PENDING = 500  # pending approvals answered at most per page
_TRIES = 5

Decision = Literal["approved", "denied"]


@dataclass(frozen=True)
class Approver:
    """Who decides: a token of an account (`*`: every account) and role, by its id."""

    account: str
    role: str
    token_id: str

    @classmethod
    def of_token(cls, token: TokenView) -> Approver:
        return cls(token.account, token.role, token.token_id)


def checked_reason(reason: str | None) -> str:
    """The decision's reason as it will be recorded (required: a person says why)."""
    if reason is None or not reason.strip():
        raise InvalidEventError("a decision needs a reason")
    if len(reason) > MAX_REASON_CHARS:
        raise InvalidEventError(
            f"the decision's reason is longer than {MAX_REASON_CHARS} characters"
        )
    identifiers.check("the decision's reason", reason)
    return scrub(reason.strip(), limit=MAX_REASON_CHARS)


def pending(
    ledger: Ledger,
    by_account: str,
    *,
    account: str | None = None,
    tool: str | None = None,
    limit: int = MAX_PENDING,
) -> list[JobView]:
    """The calls awaiting approval that `by_account` covers, oldest first (a parked job does
    not change until it is decided, so its position is its decision's)."""
    if account is not None and not may_see(by_account, account):
        return []
    scope = account if account is not None else (None if by_account == "*" else by_account)
    where = JobFilter(
        account=scope,
        status=Status.AWAITING_APPROVAL.value,
        tool=tool,
        limit=max(1, min(limit, MAX_PENDING)),
    )
    with ledger.store.reading() as reads:
        return reads.jobs(where)


def decide(
    ledger: Ledger,
    job_id: str,
    by: Approver,
    decision: Decision,
    reason: str | None,
    dispatcher: Dispatcher | Outbox | None = None,
) -> JobView:
    """Approve or deny a parked call; the job's view after the decision. An approved one is
    handed to the outbox (as a submit's accepted job is; with none, the reconciler's relay
    publishes it). JobNotFoundError:
    unknown, or an account `by` does not cover. SelfApprovalError: `by` submitted it.
    NotDecidableError: not awaiting approval (decided before: its envelope says how)."""
    key = job_key(job_id)
    if key is None:
        raise JobNotFoundError(job_id)
    said = checked_reason(reason)
    for _ in range(_TRIES):
        with ledger.store.transaction() as tx:
            view = tx.job(key)
            if view is None or not may_see(by.account, view.account):
                raise JobNotFoundError(job_id)
            if view.submitted_by is not None and view.submitted_by == by.token_id:
                raise SelfApprovalError(key)
            if view.status is not Status.AWAITING_APPROVAL:
                raise NotDecidableError(key, _cause(view), envelope(view).model_dump(mode="json"))
            events = [NewEvent(payload=_decision(by, decision, said), actor=by.token_id)]
            if decision == "denied":
                events.append(NewEvent(payload=denied_outcome(said), actor=by.token_id))
            done = tx.append_jobs([JobAppend(key, events, view)])[0]
        if done.status is AppendStatus.OK:
            event_log.approval(view, decision)
            if decision == "denied":
                event_log.outcome(view, events[-1].payload, None)
            outbox = outbox_for(ledger, dispatcher)
            if decision == "approved" and outbox is not None:
                outbox.send(done.job)
            return done.job
        # CONFLICT or TERMINAL: another decision, a cancel or the expiry came first.
    raise ContentionError(f"job {key} kept changing while its approval was being decided")


def _decision(by: Approver, decision: Decision, reason: str) -> JobApprovalDecided:
    return JobApprovalDecided(
        decision=decision, reason=reason, token_id=by.token_id, account=by.account, role=by.role
    )


def _cause(view: JobView) -> str:
    """Why a job cannot be decided: its approval's decision, or its status."""
    if view.approval is not None and view.approval.decision is not None:
        return view.approval.decision
    if view.cancelled is not None:
        return "cancelled"
    return view.status.value if view.approval is not None else "no_approval_needed"

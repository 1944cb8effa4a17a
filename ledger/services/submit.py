"""Submit = decision, in one transaction: refuse naming the precondition, or accept; then
hand the job id (only the id) to the outbox. A broker that is down loses nothing: the decision
is the outbox's record, and the job is published once the broker takes it (by this process,
or by the reconciler's relay if this one dies first).

Rate-limited before anything (docs/fairness.md): an account submitting faster than its rate
is answered `RateLimitedError` and nothing is written, not even a refusal, so a flood of
refused calls cannot grow the ledger; the refusals are counted (telemetry), not recorded.

Refused when asked, not parked: a job whose start deadline the backlog ahead already exceeds
is refused (`QUOTA_EXCEEDED`, cause `backlog`, with `retry_after_s`) instead of queued."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from ledger import event_log
from ledger.brakes import brake_error, scopes_for
from ledger.clock import now
from ledger.codes import Code, Status
from ledger.decisions import (
    Caller,
    JobRequest,
    backlog_refusal,
    permission_refusal,
    quota_refusal,
    retry_after,
    tool_refusal,
)
from ledger.dispatch import Dispatcher
from ledger.error_info import ErrorInfo
from ledger.errors import (
    ContentionError,
    IdempotencyConflictError,
    NotAuthenticatedError,
    RateLimitedError,
)
from ledger.events import ApprovalAsk, JobAccepted, JobRefused, NewEvent
from ledger.fairness import rate_refusal
from ledger.job_view import JobView
from ledger.persistence.appends import AppendStatus, JobAppend, JobAppended, QuotaCheck
from ledger.queueing import Backlog, effective_start_within
from ledger.runtime.ledger import Ledger
from ledger.runtime.outbox import Outbox, outbox_for
from ledger.scrub import scrub
from ledger.secrets import SealedArgs, seal_args
from ledger.services import turns
from ledger.telemetry import telemetry
from ledger.tools import ToolSpec, get_tool
from ledger.tracing import TraceRecord, tracer
from ledger.uuid7 import new_id

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Submitted:
    view: JobView
    replayed: bool  # True: an earlier job with the same key and body, answered again


def submit(
    ledger: Ledger,
    caller: Caller,
    request: JobRequest,
    dispatcher: Dispatcher | Outbox | None = None,
    trace: TraceRecord | None = None,
) -> Submitted:
    """Record the decision; send an accepted job through the outbox (a bare dispatcher is
    sent to inline). Raises IdempotencyConflictError when the key was used with another
    body. Raises RateLimitedError, having written nothing, over the account's rate. `trace`:
    the caller's trace context (W3C `traceparent`), which the decision's span continues; the
    decision records that span (or, tracing off, the caller's context)."""
    spans = tracer()
    if not spans.enabled:
        return _submit(ledger, caller, request, dispatcher, trace)
    attributes = {"outcomes.tool": request.tool, "outcomes.account": caller.account}
    made = spans.start("outcomes.submit", trace, attributes)
    try:
        submitted = _submit(ledger, caller, request, dispatcher, made.record)
        made.set_attribute("outcomes.job_id", submitted.view.job_id)
        made.set_attribute("outcomes.status", submitted.view.status.value)
        made.set_attribute("outcomes.replayed", submitted.replayed)
        return submitted
    except BaseException as exc:
        made.fail(type(exc).__name__)
        raise
    finally:
        made.end()


def _submit(
    ledger: Ledger,
    caller: Caller,
    request: JobRequest,
    dispatcher: Dispatcher | Outbox | None,
    trace: TraceRecord | None,
) -> Submitted:
    _take_rate(ledger, caller)
    if request.turn is not None and request.halt_on_failure:
        # A turn that asked to halt on failure, whose spending call failed: its brake holds
        # from here on, and this call's decision below refuses it (docs/turns.md). Asked only
        # of a call that asks to halt too: a turn's read costs what its calls cost.
        turns.halt_if_failed(ledger, caller.account, request.turn)
    outbox = outbox_for(ledger, dispatcher)
    gauge = outbox.backlog if outbox is not None else None
    backlog = gauge.current() if gauge is not None else None
    submitted = _decide(ledger, caller, request, backlog, trace)
    view = submitted.view
    if not submitted.replayed:
        event_log.decision(view)
    parked = view.status is Status.AWAITING_APPROVAL  # dispatched once a person approves it
    if outbox is not None and view.accepted and not submitted.replayed and not parked:
        outbox.send(view)
    if parked and not submitted.replayed:
        event_log.approval_requested(view)
    return submitted


def _take_rate(ledger: Ledger, caller: Caller) -> None:
    """One statement on the account's bucket, shared by every API process (the database's)."""
    limits = ledger.limits
    if not limits.rate_limited:
        return
    wait = ledger.store.take_submit_token(caller.account, limits.rate_per_s, limits.bucket)
    if wait > 0:
        telemetry().submit_rate_limited()
        raise RateLimitedError(rate_refusal(caller.account, limits, wait))


def _decide(
    ledger: Ledger,
    caller: Caller,
    request: JobRequest,
    backlog: Backlog | None,
    trace: TraceRecord | None = None,
) -> Submitted:
    """Decide, append, map the status: one append in this process's group commit, whose
    statuses answer every precondition the store checks (the brake, the quota, a held key, a
    revoked token). A refused precondition is recorded as the refusal it names, in a second
    append; a held key replays its holder (the same body) or conflicts."""
    spec = get_tool(request.tool)
    if permission_refusal(caller, request) is not None:
        request = _keyless(request)  # the key is the account's: no replay for this token
    refusal = tool_refusal(spec, caller, request) or backlog_check(spec, request, backlog)
    job_id = new_id()
    sealed = sealed_args(ledger, spec, request, job_id)
    refusal = refusal or unsealable(request, sealed)
    ask = approval_ask(spec, request) if refusal is None else None
    key = ledger.request_key
    token_id = caller.token_id if caller.recheck_token else None

    def append(refused: ErrorInfo | None) -> JobAppended:
        payload = _payload(spec, caller, request, refused, key, sealed, trace, ask)
        checks = refused is None  # a refusal is recorded whatever the brakes and quota say
        item = JobAppend(
            job_id,
            [NewEvent(payload=payload, actor=caller.token_id)],
            None,
            brake_scopes=scopes_for(request.tool, caller.account, request.turn) if checks else (),
            notify=False,  # nobody can wait on a job not yet answered
            token_id=token_id,
            quota=_quota(spec) if checks else None,
        )
        done = ledger.appends.submit(item)
        if done.status is AppendStatus.REVOKED:
            raise NotAuthenticatedError()
        return done

    done = append(refusal)
    if done.status is AppendStatus.BRAKED:
        done = append(brake_error(done.brakes[0]))
    elif done.status is AppendStatus.QUOTA:
        done = append(_quota_refusal(spec, request, done.oldest))
    if done.status is AppendStatus.IDEMPOTENCY and done.holder is not None:
        return _replay(done.holder, request, sealed, key)
    if done.status is not AppendStatus.OK:
        raise ContentionError(f"job {job_id} could not be recorded ({done.status}); retry")
    return Submitted(done.job, replayed=False)


def _quota(spec: ToolSpec | None) -> QuotaCheck | None:
    if spec is None or spec.quota is None:
        return None
    return QuotaCheck(spec.quota.limit, now() - timedelta(seconds=spec.quota.window_s))


def _quota_refusal(
    spec: ToolSpec | None, request: JobRequest, oldest: datetime | None
) -> ErrorInfo:
    assert spec is not None and spec.quota is not None  # only a quota answers QUOTA
    window = spec.quota.window_s
    wait = retry_after(oldest, window, now()) if oldest else window
    return quota_refusal(request.tool, spec.quota.limit, window, wait)


def _replay(holder: JobView, request: JobRequest, sealed: SealedArgs, key: bytes) -> Submitted:
    """The key's holder answered again, when it was asked with the same body: under any key
    the keyring holds (the same secret replays after a rotation), and as sent (a decision
    recorded before secrets were sealed hashed that)."""
    if not any(
        replace(request, args=args).same_body(holder.request_hash, key)
        for args in (*sealed.fingerprints, request.args)
    ):
        raise IdempotencyConflictError(holder.job_id)
    return Submitted(holder, replayed=True)


def sealed_args(
    ledger: Ledger, spec: ToolSpec | None, request: JobRequest, job_id: str
) -> SealedArgs:
    """The arguments as the decision records them: the tool's declared secrets sealed."""
    model = spec.args_model if spec is not None else None
    keyring = ledger.secrets if model is not None else None
    return seal_args(model, request.args, job_id, keyring)


def unsealable(request: JobRequest, sealed: SealedArgs) -> ErrorInfo | None:
    """Secrets with no key to seal them: recorded refused (the values withheld), never kept."""
    if not sealed.withheld:
        return None
    return ErrorInfo(
        code=Code.CAPABILITY_UNAVAILABLE,
        dependency="secrets key",
        operation="seal the secret arguments",
        required_capability="OUTCOMES_SECRETS_KEY",
        fix="set OUTCOMES_SECRETS_KEY or OUTCOMES_SECRETS_KEY_FILE on the API and every "
        "worker (docs/secrets.md), then submit again",
        message=f"This deployment has no key to seal the secret arguments of {request.tool!r} "
        "with, so the job was not accepted; their values were not kept.",
    )


def _payload(
    spec: ToolSpec | None,
    caller: Caller,
    request: JobRequest,
    refusal: ErrorInfo | None,
    key: bytes,
    sealed: SealedArgs,
    trace: TraceRecord | None = None,
    approval: ApprovalAsk | None = None,
) -> JobAccepted | JobRefused:
    fingerprinted = replace(request, args=sealed.fingerprints[0])
    fields: dict[str, Any] = {
        "account": caller.account,
        "tool": request.tool,
        "args": sealed.stored,
        "idempotency_key": request.idempotency_key,
        "request_hash": fingerprinted.fingerprint(key),
        "spends": bool(spec and spec.spends),
        "secret_paths": sealed.paths,
        "trace": trace,
        "turn": request.turn,
    }
    if refusal is not None:
        return JobRefused(**fields, error=refusal)
    assert spec is not None
    return JobAccepted(
        **fields,
        timeout_s=spec.timeout_s,
        max_attempts=spec.max_attempts,
        start_within_s=effective_start_within(request.start_within_s, spec.start_within_s),
        budget_bytes=request.budget_bytes,
        approval=approval,
        turn_halt=True if request.turn is not None and request.halt_on_failure else None,
    )


def approval_ask(spec: ToolSpec | None, request: JobRequest) -> ApprovalAsk | None:
    """Whether a person must approve this call before it runs (docs/approvals.md): the tool's
    reason, and until when the call may wait for one (the tool's `approval_expires_s`,
    capped by the call's start deadline). Asked only of a call nothing refused."""
    if spec is None or spec.approval_mode is None:
        return None
    reason = spec.approval_reason(spec.args_model.model_validate(request.args))
    if reason is None:
        return None
    deadline = effective_start_within(request.start_within_s, spec.start_within_s)
    wait_s = min(spec.approval_expires_s, deadline)
    expires_at = now() + timedelta(seconds=wait_s)
    return ApprovalAsk(reason=scrub(reason, limit=500), expires_at=expires_at)


def backlog_check(
    spec: ToolSpec | None, request: JobRequest, backlog: Backlog | None
) -> ErrorInfo | None:
    """Refused now when the backlog ahead would not start it within its deadline."""
    if spec is None or backlog is None:
        return None
    deadline = effective_start_within(request.start_within_s, spec.start_within_s)
    retry_s = backlog.refuses(deadline)
    if retry_s is None:
        return None
    return backlog_refusal(request.tool, backlog.wait_s() or 0.0, deadline, retry_s)


def _keyless(request: JobRequest) -> JobRequest:
    """A refusal that must not take (or replay) the account's idempotency key."""
    return replace(request, idempotency_key=None)

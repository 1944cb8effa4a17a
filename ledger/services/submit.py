"""Submit = decision, in one transaction: refuse naming the precondition, or accept; then
hand the job id (only the id) to the dispatcher. A broker that is down loses nothing: the
decision is recorded and the reconciler re-dispatches accepted jobs that never started."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from ledger import event_log
from ledger.brakes import brake_error, holding, scopes_for
from ledger.clock import now
from ledger.decisions import (
    Caller,
    JobRequest,
    permission_refusal,
    quota_refusal,
    retry_after,
    tool_refusal,
)
from ledger.dispatch import Dispatcher
from ledger.error_info import ErrorInfo
from ledger.errors import (
    ContentionError,
    DispatchError,
    IdempotencyConflictError,
    IdempotencyKeyTakenError,
)
from ledger.events import JobAccepted, JobRefused, NewEvent, job_stream
from ledger.job_view import JobView
from ledger.persistence.appends import NO_STREAM, AppendStatus, JobAppend
from ledger.persistence.base import Writes
from ledger.services.ledger import Ledger
from ledger.tools import ToolSpec, get_tool

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Submitted:
    view: JobView
    replayed: bool  # True: an earlier job with the same key and body, answered again


def submit(
    ledger: Ledger, caller: Caller, request: JobRequest, dispatcher: Dispatcher | None = None
) -> Submitted:
    """Record the decision; dispatch an accepted job. Raises IdempotencyConflictError when
    the key was used with another body."""
    submitted = _decide_grouped(ledger, caller, request) or _decide_locked(ledger, caller, request)
    view = submitted.view
    if not submitted.replayed:
        event_log.decision(view)
    if dispatcher is not None and view.accepted and not submitted.replayed:
        try:
            dispatcher.dispatch(view.job_id)
        except DispatchError as exc:
            log.warning(
                "job %s accepted but not dispatched (%s); the reconciler will", view.job_id, exc
            )
    return submitted


def _decide_grouped(ledger: Ledger, caller: Caller, request: JobRequest) -> Submitted | None:
    """The common decision in one append that joins this process's group commit: the brake
    is checked by the store inside it. None: this request needs the locked way (its tool has
    a quota to count, or its idempotency key is already held: a replay or a conflict)."""
    spec = get_tool(request.tool)
    refusal = tool_refusal(spec, caller, request)
    if refusal is None and spec is not None and spec.quota is not None:
        return None
    job_id = str(uuid.uuid4())
    key = ledger.request_key
    payload = _payload(spec, caller, request, refusal, key)
    scopes = () if refusal is not None else scopes_for(request.tool, caller.account)
    event = NewEvent(payload=payload, actor=caller.token_id)
    done = ledger.appends.submit(
        JobAppend(job_id, [event], None, brake_scopes=scopes, notify=False)
    )
    if done.status is AppendStatus.BRAKED:
        refused = _payload(spec, caller, request, brake_error(done.brakes[0]), key)
        event = NewEvent(payload=refused, actor=caller.token_id)
        done = ledger.appends.submit(JobAppend(job_id, [event], None, notify=False))
    if done.status is AppendStatus.IDEMPOTENCY:
        if refusal is None or permission_refusal(caller, request) is None:
            return None  # a replay or a conflict: the locked way tells which
        # The key is held by a job this token may not have asked for: no replay for it.
        refused = _payload(spec, caller, _keyless(request), refusal, key)
        event = NewEvent(payload=refused, actor=caller.token_id)
        done = ledger.appends.submit(JobAppend(job_id, [event], None, notify=False))
    if done.status is not AppendStatus.OK:
        raise ContentionError(f"job {job_id} could not be recorded ({done.status}); retry")
    return Submitted(done.job, replayed=False)


def _decide_locked(ledger: Ledger, caller: Caller, request: JobRequest) -> Submitted:
    for _ in range(3):
        try:
            return _decide(ledger, caller, request)
        except IdempotencyKeyTakenError:
            continue  # a concurrent submit with this key committed first: replay it
    raise ContentionError("the idempotency key is contended by concurrent submits; retry")


def _payload(
    spec: ToolSpec | None,
    caller: Caller,
    request: JobRequest,
    refusal: ErrorInfo | None,
    key: bytes,
) -> JobAccepted | JobRefused:
    fields: dict[str, Any] = {
        "account": caller.account,
        "tool": request.tool,
        "args": request.args,
        "idempotency_key": request.idempotency_key,
        "request_hash": request.fingerprint(key),
        "spends": bool(spec and spec.spends),
    }
    if refusal is not None:
        return JobRefused(**fields, error=refusal)
    assert spec is not None
    return JobAccepted(**fields, timeout_s=spec.timeout_s, max_attempts=spec.max_attempts)


def _keyless(request: JobRequest) -> JobRequest:
    """A refusal that must not take (or replay) the account's idempotency key."""
    return replace(request, idempotency_key=None)


def _decide(ledger: Ledger, caller: Caller, request: JobRequest) -> Submitted:
    spec = get_tool(request.tool)
    secret = ledger.request_key
    # Permission before the replay lookup: the key is the account's, not the token's.
    if permission_refusal(caller, request) is not None:
        request = _keyless(request)
    with ledger.store.transaction() as tx:
        key = request.idempotency_key
        if key is not None:
            tx.lock("idempotency", caller.account, key)
            earlier = tx.job_by_idempotency_key(caller.account, key)
            if earlier is not None:
                if not request.same_body(earlier.request_hash, secret):
                    raise IdempotencyConflictError(earlier.job_id)
                return Submitted(earlier, replayed=True)
        refusal = tool_refusal(spec, caller, request) or _precondition(tx, spec, caller, request)
        payload = _payload(spec, caller, request, refusal, secret)
        event = NewEvent(payload=payload, actor=caller.token_id)
        appended = tx.append(job_stream(uuid.uuid4()), [event], NO_STREAM)
        return Submitted(appended.job, replayed=False)


def _precondition(
    tx: Writes, spec: ToolSpec | None, caller: Caller, request: JobRequest
) -> ErrorInfo | None:
    """Brake, then quota (the quota is counted under a lock, so it is exact)."""
    assert spec is not None
    held = holding(tx.active_brakes(), request.tool, caller.account)
    if held:
        return brake_error(held[0])
    if spec.quota is None:
        return None
    tx.lock("quota", caller.account, request.tool)
    moment = now()
    since = moment - timedelta(seconds=spec.quota.window_s)
    count, oldest = tx.accepted_in_window(caller.account, request.tool, since)
    if count < spec.quota.limit:
        return None
    wait = retry_after(oldest, spec.quota.window_s, moment) if oldest else spec.quota.window_s
    return quota_refusal(request.tool, spec.quota.limit, spec.quota.window_s, wait)

"""Submit = decision, in one transaction: refuse naming the precondition, or accept; then
enqueue the job id (only the id). A broker that is down loses nothing: the decision is
recorded and the reconciler re-dispatches accepted jobs that never started."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from ledger.brakes import brake_error, holding
from ledger.decisions import Caller, JobRequest, quota_refusal, retry_after, tool_refusal
from ledger.error_info import ErrorInfo
from ledger.errors import ContentionError, IdempotencyKeyTakenError, LedgerError
from ledger.events import JobAccepted, JobRefused, NewEvent, job_stream
from ledger.job_view import JobView, evolve
from ledger.persistence.brakes import active_brakes
from ledger.persistence.jobs import accepted_in_window, find_by_idempotency_key
from ledger.persistence.locks import key_for, lock_exclusive
from ledger.persistence.store import NO_STREAM, EventStore, Transaction
from ledger.tools import ToolSpec, get_tool

log = logging.getLogger(__name__)


class DispatchError(LedgerError):
    """The job id could not be handed to the broker (the reconciler will try again)."""


class Dispatcher(Protocol):
    def dispatch(self, job_id: str, delay_s: float = 0.0) -> None: ...


class IdempotencyConflictError(LedgerError):
    """The idempotency key was used before with another request body."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"idempotency key already used for job {job_id} with another body")
        self.job_id = job_id


@dataclass(frozen=True)
class Submitted:
    view: JobView
    replayed: bool  # True: an earlier job with the same key and body, answered again


def submit(
    store: EventStore, caller: Caller, request: JobRequest, dispatcher: Dispatcher | None = None
) -> Submitted:
    for _ in range(3):
        try:
            submitted = _decide(store, caller, request)
            break
        except IdempotencyKeyTakenError:
            continue  # a concurrent submit with this key committed first: replay it
    else:
        raise ContentionError("the idempotency key is contended by concurrent submits; retry")
    view = submitted.view
    if dispatcher is not None and view.accepted and not submitted.replayed:
        try:
            dispatcher.dispatch(view.job_id)
        except DispatchError as exc:
            log.warning(
                "job %s accepted but not dispatched (%s); the reconciler will", view.job_id, exc
            )
    return submitted


def _decide(store: EventStore, caller: Caller, request: JobRequest) -> Submitted:
    spec = get_tool(request.tool)
    fingerprint = request.fingerprint
    with store.transaction() as tx:
        key = request.idempotency_key
        if key is not None:
            lock_exclusive(tx.conn, key_for("idempotency", caller.account, key))
            earlier = find_by_idempotency_key(tx.conn, caller.account, key)
            if earlier is not None:
                if earlier.request_hash != fingerprint:
                    raise IdempotencyConflictError(earlier.job_id)
                return Submitted(earlier, replayed=True)
        refusal = tool_refusal(spec, caller, request) or _precondition(tx, spec, caller, request)
        job_id = str(uuid.uuid4())
        request_fields: dict[str, Any] = {
            "account": caller.account,
            "tool": request.tool,
            "args": request.args,
            "idempotency_key": key,
            "request_hash": fingerprint,
            "spends": bool(spec and spec.spends),
        }
        payload: JobAccepted | JobRefused
        if refusal is not None:
            payload = JobRefused(**request_fields, error=refusal)
        else:
            assert spec is not None
            payload = JobAccepted(
                **request_fields, timeout_s=spec.timeout_s, max_attempts=spec.max_attempts
            )
        event = NewEvent(payload=payload, actor=caller.token_id)
        recorded = tx.append(job_stream(job_id), [event], NO_STREAM)
        return Submitted(evolve(None, recorded[0]), replayed=False)


def _precondition(
    tx: Transaction, spec: ToolSpec | None, caller: Caller, request: JobRequest
) -> ErrorInfo | None:
    """Brake, then quota (the quota is counted under a lock, so it is exact)."""
    assert spec is not None
    held = holding(active_brakes(tx.conn), request.tool, caller.account)
    if held:
        return brake_error(held[0])
    if spec.quota is None:
        return None
    lock_exclusive(tx.conn, key_for("quota", caller.account, request.tool))
    now = datetime.now(UTC)
    since = now - timedelta(seconds=spec.quota.window_s)
    count, oldest = accepted_in_window(tx.conn, caller.account, request.tool, since)
    if count < spec.quota.limit:
        return None
    wait = retry_after(oldest, spec.quota.window_s, now) if oldest else spec.quota.window_s
    return quota_refusal(request.tool, spec.quota.limit, spec.quota.window_s, wait)

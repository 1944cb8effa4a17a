"""One log line per decision, outcome, reconciler finding and brake change (docs/operations.md).

Emitted on the `outcomes.events` logger at INFO, with the fields in `record.outcomes` (a dict of
plain values) for the adapters' formatters. Built here, and only from the fields named in
FIELDS, so that no argument value, result or secret can reach a log line: a job's `args`,
`result` and failure text are never read.
"""

from __future__ import annotations

import logging
from typing import Any

from ledger.brake_view import BrakeView
from ledger.codes import Code, Status
from ledger.events import Payload
from ledger.job_fold import status_after
from ledger.job_view import JobView

log = logging.getLogger("outcomes.events")

FIELDS = (
    "event",
    "job_id",
    "tool",
    "account",
    "status",
    "code",
    "worker",
    "attempt",
    "finding",
    "cause",
    "late",
    "brake_id",
    "scope",
    "operator",
)

# Who records findings: the reconciler's events are the only ones counted as findings (the
# stores' kept counts of them, migration 0017, name it too).
FINDER = "reconciler"
# A reconciler finding's kind, by the event it records (docs/operations.md).
FINDINGS = {
    "job.redispatched": "redispatched",
    "work.retry_scheduled": "next_attempt",
    "job.outcome_missing": "outcome_missing",
}


def decision(view: JobView) -> None:
    status = "accepted" if view.accepted else "refused"
    _emit("decision", _job(view) | {"status": status, "code": _code(view.code)})


def outcome(
    view: JobView,
    payload: Payload,
    worker: str | None,
    late: bool = False,
    status: Status | None = None,
) -> None:
    """What an attempt recorded for a job (`view`: the job as claimed; `status`: what the
    payload leaves it in, when the caller has folded it already)."""
    status = status if status is not None else status_after(view, payload)
    fields = _job(view) | {
        "status": status.value if status else payload.type,
        "code": _code(payload.code),
        "worker": worker,
        "attempt": getattr(payload, "attempt", None),
    }
    _emit("late_outcome" if late else "outcome", fields | ({"late": True} if late else {}))


def finding(view: JobView, payload: Payload, status: Status | None = None) -> None:
    """A reconciler finding recorded for a job (`view`: the job as the reconciler saw it;
    `status`: what the payload leaves it in, when the caller has folded it already)."""
    status = status if status is not None else status_after(view, payload)
    fields = _job(view) | {
        "status": status.value if status else None,
        "code": _code(payload.code),
        "finding": FINDINGS.get(payload.type, payload.type),
        "cause": finding_cause(payload),
        "worker": "reconciler",
    }
    _emit("finding", fields)


def finding_cause(payload: Payload) -> str:
    """Why the reconciler recorded it: the error's cause, a re-dispatch's evidence, or (a
    re-dispatch recorded before evidence was required) the dispatch deadline passing."""
    error = getattr(payload, "error", None)
    cause = getattr(error, "cause", None) or getattr(payload, "evidence", None)
    return str(cause) if cause else "dispatch_deadline"


def approval(view: JobView, status: str) -> None:
    """A call parked for a person's approval (`awaiting_approval`), or that person's decision
    (`approved`, `denied`, `expired`): docs/approvals.md."""
    _emit("approval", _job(view) | {"status": status})


def approval_requested(view: JobView) -> None:
    approval(view, "awaiting_approval")


def brake(view: BrakeView, action: str) -> None:
    fields = {"brake_id": view.brake_id, "scope": view.scope, "operator": view.operator}
    if action == "released":
        fields["operator"] = view.released_by or view.operator
    _emit("brake", fields | {"status": action})


def _job(view: JobView) -> dict[str, Any]:
    return {"job_id": view.job_id, "tool": view.tool, "account": view.account}


def _code(code: Code | None) -> str | None:
    return code.value if code is not None else None


def _emit(event: str, fields: dict[str, Any]) -> None:
    if not log.isEnabledFor(logging.INFO):
        return
    kept = {"event": event} | {k: v for k, v in fields.items() if k in FIELDS and v is not None}
    text = " ".join(f"{k}={v}" for k, v in kept.items() if k != "event")
    log.info("%s %s", event, text, extra={"outcomes": kept})

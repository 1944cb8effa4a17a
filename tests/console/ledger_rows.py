"""A small ledger for the console's in-process tests: one job of each kind the pages show (a
failure with retries and fingerprints, a worker_lost finding on a paid tool, a late outcome, a
job halted by a brake that still holds, a released brake), every job's arguments holding the
canary, and one token of each role."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from ledger.brakes import brake_error
from ledger.codes import Code, OutcomeMissingCause
from ledger.error_info import ErrorInfo
from ledger.events import (
    JobAccepted,
    JobOutcomeMissing,
    WorkFailed,
    WorkHalted,
    WorkLateOutcome,
    WorkRetryScheduled,
    WorkStarted,
    WorkSucceeded,
    job_stream,
)
from ledger.persistence.appends import NO_STREAM
from ledger.runtime.ledger import Ledger
from ledger.services import brakes, tokens
from tests.factories import new

CANARY = "sk_live_CANARY_7f3a9c1e5b"  # looks like a secret; must never reach a page


@dataclass(frozen=True)
class Seeded:
    operator: str
    auditor: str
    agent: str
    acme_operator: str
    failed: str
    lost: str
    halted: str
    late: str
    brake_id: str


def _job(
    ledger: Ledger, tool: str, *events: object, spends: bool = False, account: str = "acme"
) -> str:
    job_id = str(uuid.uuid4())
    accepted = JobAccepted(
        account=account, tool=tool, args={"api_key": CANARY, "ref": CANARY}, spends=spends
    )
    ledger.store.append(job_stream(job_id), [new(accepted), *events], NO_STREAM)  # type: ignore[list-item]
    return job_id


def seed(ledger: Ledger) -> Seeded:
    soon = datetime.now(UTC) + timedelta(seconds=30)

    def started(attempt: int) -> object:
        return new(
            WorkStarted(attempt=attempt, worker="host:101", lease_expires_at=soon),
            "worker:host:101",
        )

    timeout = ErrorInfo(
        code=Code.SOURCE_UNRELIABLE, dependency="tracker", message="timed out", retryable=True
    )
    failed = _job(
        ledger,
        "tracker.read_issue",
        started(1),
        new(
            WorkRetryScheduled(
                attempt=1,
                error=timeout,
                fingerprint="tracker-config-v1",
                due_at=soon,
                detail="tracker timed out after 30 s",
            )
        ),
        started(2),
        new(WorkFailed(attempt=2, error=timeout, fingerprint="tracker-config-v1")),
    )
    lost_error = ErrorInfo(
        code=Code.OUTCOME_MISSING, message="The worker was lost.", cause="worker_lost"
    )
    lost = _job(
        ledger,
        "debug.spend_slowly",
        started(1),
        new(
            JobOutcomeMissing(attempt=1, cause=OutcomeMissingCause.WORKER_LOST, error=lost_error),
            "reconciler",
        ),
        spends=True,
    )
    late = _job(
        ledger,
        "tracker.read_issue",
        started(1),
        new(
            JobOutcomeMissing(attempt=1, cause=OutcomeMissingCause.WORKER_LOST, error=lost_error),
            "reconciler",
        ),
        new(
            WorkLateOutcome(
                attempt=1, outcome_type="work.succeeded", outcome={"result": {"ok": True}}
            )
        ),
    )
    old = brakes.pull(ledger, "tool:mail.send_release_note", "bounce storm", "ops-ann")
    brakes.release(ledger, old.brake_id, "provider fixed", "ops-ann")
    held = brakes.pull(ledger, "tool:social.draw_card", "cards render blank", "ops-bob")
    halted = _job(
        ledger, "social.draw_card", new(WorkHalted(attempt=1, error=brake_error(held))), spends=True
    )
    _job(
        ledger,
        "tracker.read_issue",
        started(1),
        new(WorkSucceeded(attempt=1, result={"issue": "T-1"})),
        account="globex",
    )

    def token(account: str, role: str) -> str:
        return tokens.create(ledger, account, role, None, "tests").token

    return Seeded(
        operator=token("*", "operator"),
        auditor=token("*", "auditor"),
        agent=token("acme", "agent"),
        acme_operator=token("acme", "operator"),
        failed=failed,
        lost=lost,
        halted=halted,
        late=late,
        brake_id=held.brake_id,
    )

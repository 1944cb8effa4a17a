"""A seeded random ledger workload, and snapshots of the read models, for the rebuild tests.

`run_workload` drives many job, brake and token streams through valid lifecycles, interleaved,
sometimes appending two events in one call; each stream's `Plan` says what its read-model row
must say (`EXPECTED`: the seed table of contract §3). `snapshot` reads every read-model row so
that the live tables can be compared with the ones `outcomes rebuild` writes.
"""

from __future__ import annotations

import hashlib
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, select

from ledger.clock import utc
from ledger.codes import Code, NextAction, OutcomeMissingCause, Status
from ledger.error_info import ErrorInfo
from ledger.events import (
    BrakePulled,
    BrakeReleased,
    JobAccepted,
    JobOutcomeMissing,
    JobRedispatched,
    JobRefused,
    NewEvent,
    Payload,
    TokenCreated,
    TokenRevoked,
    WorkDeclined,
    WorkFailed,
    WorkHalted,
    WorkLateOutcome,
    WorkPartial,
    WorkRetryScheduled,
    WorkStarted,
    WorkSucceeded,
    job_stream,
)
from ledger.job_view import JobEnvelope, JobView, envelope
from ledger.persistence.schema import NOT_FOLDED, READ_MODEL_TABLES, events, jobs
from ledger.persistence.sql_store import SqlStore

SEEDS = (20261130, 4242)
JOBS_PER_KIND = 8
BRAKES = 12
TOKENS = 12
PAIR_RATE = 0.3  # how often two consecutive events of a stream go in one append
BASE_TIME = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
ACCOUNTS = ("acme", "globex", "initech")
TOOLS = ("tracker.read_issue", "billing.charge", "mail.send")
TOOL_FAILURES = (Code.ACCESS_DENIED, Code.SOURCE_UNRELIABLE, Code.REFERENCE_UNRESOLVED)
REFUSALS = (Code.QUOTA_EXCEEDED, Code.INPUT_MISSING, Code.CAPABILITY_UNAVAILABLE)

Snapshot = dict[str, list[dict[str, Any]]]

# Status and next action per lifecycle: the seed table of contract §3 (None: depends on spends).
EXPECTED: dict[str, tuple[Status, NextAction | None]] = {
    "succeeded": (Status.SUCCEEDED, NextAction.ACCEPT),
    "declined": (Status.DECLINED, NextAction.ACCEPT),
    "partial": (Status.PARTIAL, NextAction.USE_PARTIAL_AND_NARROW),
    "failed": (Status.FAILED, NextAction.STOP_AND_REPORT),
    "retried": (Status.SUCCEEDED, NextAction.ACCEPT),
    "refused": (Status.REFUSED, NextAction.SATISFY_PRECONDITION),
    "halted": (Status.REFUSED, NextAction.SATISFY_PRECONDITION),
    "lost": (Status.FAILED, None),
    "queued": (Status.QUEUED, NextAction.WAIT),
    "running": (Status.RUNNING, NextAction.WAIT),
    "retrying": (Status.RETRYING, NextAction.WAIT),
}
OPEN_STATUSES = {Status.QUEUED, Status.RUNNING, Status.RETRYING}


# --- the workload -------------------------------------------------------------------------


@dataclass
class Plan:
    """One stream: the events still to append, and what its read-model row must say."""

    stream_id: str
    key: str  # the read model's primary key
    kind: str
    events: list[NewEvent]
    spends: bool = False
    brake_id: str | None = None  # halted jobs: the brake that stopped them
    late: dict[str, Any] | None = None  # lost jobs: the outcome that arrived after the end
    version: int = 0
    last_position: int = 0


@dataclass
class Workload:
    jobs: list[Plan] = field(default_factory=list)
    brakes: list[Plan] = field(default_factory=list)
    tokens: list[Plan] = field(default_factory=list)
    event_count: int = 0
    appends: int = 0


def new_id(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def error(code: Code, **extra: Any) -> ErrorInfo:
    return ErrorInfo(code=code, message=f"{code.value.lower()} (test)", **extra)


def actor_for(payload: Payload, worker: str) -> str:
    if payload.type in {"job.accepted", "job.refused"}:
        return "tok-agent"
    if payload.type in {"job.redispatched", "job.outcome_missing"}:
        return "reconciler"
    return worker


class JobScript:
    """Builds one job's event payloads for a lifecycle kind."""

    def __init__(self, rng: random.Random, kind: str, spends: bool) -> None:
        self.rng = rng
        self.kind = kind
        self.spends = spends
        self.worker = f"worker-{rng.randrange(4)}"
        self.account = rng.choice(ACCOUNTS)
        self.tool = rng.choice(TOOLS)

    def accepted(self) -> JobAccepted:
        key = f"idem-{new_id(self.rng)}" if self.rng.random() < 0.5 else None
        return JobAccepted(
            account=self.account,
            tool=self.tool,
            args={"n": self.rng.randrange(1000), "ref": new_id(self.rng)},
            idempotency_key=key,
            request_hash=hashlib.sha256(self.account.encode()).hexdigest(),
            spends=self.spends,
            timeout_s=float(self.rng.choice((30, 60, 300))),
            max_attempts=1 if self.spends else 3,
        )

    def started(self, attempt: int) -> WorkStarted:
        lease = BASE_TIME + timedelta(seconds=self.rng.randrange(86_400), microseconds=417)
        return WorkStarted(attempt=attempt, worker=self.worker, lease_expires_at=lease)

    def retry(self, attempt: int) -> WorkRetryScheduled:
        return WorkRetryScheduled(
            attempt=attempt,
            error=error(Code.SOURCE_UNRELIABLE, dependency="tracker", retryable=True),
            detail="HTTP 503 from upstream",
            fingerprint=self.rng.choice((None, "cfg-v1")),
            due_at=BASE_TIME + timedelta(seconds=self.rng.randrange(1, 600)),
        )

    def result(self) -> dict[str, Any]:
        return {"value": self.rng.randrange(10_000), "items": [new_id(self.rng)]}


def job_payloads(script: JobScript, brake_ids: list[str]) -> tuple[list[Payload], Plan]:
    """The payloads of one job of `script.kind`, and its plan (stream and expectations)."""
    rng, kind = script.rng, script.kind
    job_id = new_id(rng)
    plan = Plan(job_stream(job_id), job_id, kind, [], spends=script.spends)
    bodies: dict[str, Callable[[], list[Payload]]] = {
        "succeeded": lambda: [
            script.accepted(),
            script.started(1),
            WorkSucceeded(attempt=1, result=script.result()),
        ],
        "declined": lambda: [
            script.accepted(),
            script.started(1),
            WorkDeclined(attempt=1, reason="already up to date", result=script.result()),
        ],
        "partial": lambda: [
            script.accepted(),
            script.started(1),
            WorkPartial(
                attempt=1, result=script.result(), processed=40, skipped=["a", "b"], total=50
            ),
        ],
        "failed": lambda: [
            script.accepted(),
            script.started(1),
            WorkFailed(
                attempt=1,
                error=error(rng.choice(TOOL_FAILURES), dependency="tracker", fix="grant read"),
                detail="403 Forbidden",
            ),
        ],
        "retried": lambda: [
            script.accepted(),
            script.started(1),
            script.retry(1),
            script.started(2),
            WorkSucceeded(attempt=2, result=script.result()),
        ],
        "refused": lambda: [
            JobRefused(
                account=script.account,
                tool=script.tool,
                args={"n": rng.randrange(1000)},
                spends=script.spends,
                error=error(rng.choice(REFUSALS), fix="satisfy it", retry_after_s=30),
            )
        ],
        "halted": lambda: [
            script.accepted(),
            JobRedispatched(dispatch=2, reason="accepted but never started"),
            script.started(1),
            WorkHalted(attempt=1, error=error(Code.BRAKE_ENGAGED, cause=plan.brake_id)),
        ],
        "lost": lambda: [
            script.accepted(),
            script.started(1),
            JobOutcomeMissing(
                attempt=1,
                cause=OutcomeMissingCause.WORKER_LOST,
                error=error(Code.OUTCOME_MISSING, cause=OutcomeMissingCause.WORKER_LOST.value),
                detail="lease expired",
            ),
            WorkLateOutcome(attempt=1, outcome_type="work.succeeded", outcome=plan.late or {}),
        ],
        "queued": lambda: [script.accepted()],
        "running": lambda: [script.accepted(), script.started(1)],
        "retrying": lambda: [script.accepted(), script.started(1), script.retry(1)],
    }
    if kind == "halted":
        plan.brake_id = rng.choice(brake_ids)
    if kind == "lost":
        plan.late = {"result": script.result()}
    return bodies[kind](), plan


def job_plans(rng: random.Random, brake_ids: list[str]) -> list[Plan]:
    plans = []
    for kind in EXPECTED:
        for n in range(JOBS_PER_KIND):
            # Retried jobs never spend (contract §4); lost jobs alternate so both branches show.
            spends = n % 2 == 0 if kind == "lost" else rng.random() < 0.5
            script = JobScript(rng, kind, spends and kind not in {"retried", "retrying"})
            payloads, plan = job_payloads(script, brake_ids)
            plan.events = [NewEvent(payload=p, actor=actor_for(p, script.worker)) for p in payloads]
            plans.append(plan)
    return plans


def brake_plans(rng: random.Random) -> list[Plan]:
    plans = []
    for _ in range(BRAKES):
        brake_id = new_id(rng)
        operator = rng.choice(("alice", "bob"))
        scope = rng.choice(("global", f"tool:{rng.choice(TOOLS)}", f"account:{ACCOUNTS[0]}"))
        payloads: list[Payload] = [
            BrakePulled(brake_id=brake_id, scope=scope, reason="incident", operator=operator)
        ]
        if rng.random() < 0.5:
            payloads.append(BrakeReleased(brake_id=brake_id, reason="fixed", operator="carol"))
        plan = Plan(f"brake-{brake_id}", brake_id, "brake", [])
        plan.events = [NewEvent(payload=p, actor=operator) for p in payloads]
        plans.append(plan)
    return plans


def token_plans(rng: random.Random) -> list[Plan]:
    plans = []
    for _ in range(TOKENS):
        token_id = new_id(rng)
        payloads: list[Payload] = [
            TokenCreated(
                token_id=token_id,
                account=rng.choice((*ACCOUNTS, "*")),
                role=rng.choice(("agent", "operator", "auditor")),
                tools=rng.choice((None, list(TOOLS[:2]))),
                token_hash=hashlib.sha256(token_id.encode()).hexdigest(),
            )
        ]
        if rng.random() < 0.5:
            payloads.append(TokenRevoked(token_id=token_id))
        plan = Plan(f"token-{token_id}", token_id, "token", [])
        plan.events = [NewEvent(payload=p, actor="operator:alice") for p in payloads]
        plans.append(plan)
    return plans


def run_workload(store: SqlStore, rng: random.Random) -> Workload:
    """Append every plan's events, streams interleaved at random, one or two per call."""
    brakes_ = brake_plans(rng)
    work = Workload(
        jobs=job_plans(rng, [p.key for p in brakes_]), brakes=brakes_, tokens=token_plans(rng)
    )
    pending = [*work.jobs, *work.brakes, *work.tokens]
    cursor = {id(plan): 0 for plan in pending}
    while pending:
        plan = rng.choice(pending)
        start = cursor[id(plan)]
        size = 2 if rng.random() < PAIR_RATE else 1
        batch = plan.events[start : start + size]
        expected = plan.version if rng.random() < 0.9 else None
        recorded = store.append(plan.stream_id, batch, expected).events
        assert [e.stream_version for e in recorded] == [
            plan.version + i for i in range(1, len(batch) + 1)
        ]
        plan.version += len(batch)
        plan.last_position = recorded[-1].position
        cursor[id(plan)] = start + len(batch)
        work.event_count += len(batch)
        work.appends += 1
        if cursor[id(plan)] == len(plan.events):
            pending.remove(plan)
    assert work.appends < work.event_count, "some appends must carry two events"
    return work


# --- snapshots ----------------------------------------------------------------------------


def normal(value: Any) -> Any:
    return utc(value) if isinstance(value, datetime) else value


def snapshot(store: SqlStore) -> Snapshot:
    """Every read-model row, ordered by primary key, datetimes in UTC; only what the events
    fold to (`NOT_FOLDED`: where a job's stream begins, which the Postgres append function and
    the rebuild set, and this workload's single-stream appends leave unset)."""
    with store.connection() as conn:
        return {
            table.name: [
                {c: normal(v) for c, v in row.items() if c not in NOT_FOLDED}
                for row in conn.execute(
                    select(table).order_by(*table.primary_key.columns)
                ).mappings()
            ]
            for table in READ_MODEL_TABLES
        }


def event_rows(store: SqlStore) -> list[tuple[Any, ...]]:
    with store.connection() as conn:
        query = select(events).order_by(events.c.position)
        return [tuple(normal(v) for v in row) for row in conn.execute(query)]


def differences(live: Snapshot, rebuilt: Snapshot) -> list[str]:
    """Readable (table, key, column) differences between two snapshots."""
    found = []
    for table in READ_MODEL_TABLES:
        pk = next(iter(table.primary_key.columns)).name
        before = {row[pk]: row for row in live[table.name]}
        after = {row[pk]: row for row in rebuilt[table.name]}
        for key in sorted(before.keys() ^ after.keys()):
            side = "live" if key in before else "rebuilt"
            found.append(f"{table.name} {key}: only in the {side} table")
        for key in sorted(before.keys() & after.keys()):
            for column, value in before[key].items():
                if after[key][column] != value:
                    found.append(
                        f"{table.name} {key}.{column}: live {value!r} != {after[key][column]!r}"
                    )
    return found


def count_events(store: SqlStore) -> int:
    with store.connection() as conn:
        return int(conn.execute(select(func.count()).select_from(events)).scalar_one())


def job_envelopes(store: SqlStore) -> dict[str, tuple[dict[str, Any], JobEnvelope]]:
    """{job id: (row columns, envelope of the row's JobView)}."""
    with store.connection() as conn:
        rows = conn.execute(select(jobs)).mappings().all()
    return {
        row["job_id"]: (dict(row), envelope(JobView.model_validate(row["view"]))) for row in rows
    }

"""A realistic ledger to tamper with, and the ways around the triggers a superuser (or
whoever holds the SQLite file) has: the tamper suites share these as fixtures and helpers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Connection, delete, insert, select, update

from ledger.chain import Problem, ProblemKind, VerifyReport, event_hash, ledger_link
from ledger.clock import now
from ledger.codes import Code
from ledger.digest import Digest
from ledger.error_info import ErrorInfo
from ledger.events import (
    AnyPayload,
    BrakePulled,
    BrakeReleased,
    JobAccepted,
    JobRefused,
    NewEvent,
    RecordedEvent,
    WorkDeclined,
    WorkFailed,
    WorkPartial,
    WorkRetryScheduled,
    WorkStarted,
    WorkSucceeded,
    job_stream,
)
from ledger.merkle import Frontier, event_leaf_hash
from ledger.merkle_store import append_leaves
from ledger.persistence.engine import make_engine
from ledger.persistence.schema import (
    events,
    ledger_events,
    ledger_order,
    ledger_sequencer,
    ledger_ticks,
    ledger_tree,
    merkle_gaps,
    merkle_nodes,
)
from ledger.persistence.sql_store import SqlStore
from tests.factories import digest_of, verify_store

# --- a realistic ledger -----------------------------------------------------------------------


def _new(payload: AnyPayload, actor: str) -> NewEvent:
    return NewEvent(payload=payload, actor=actor)


def _accepted(tool: str, args: dict[str, Any], spends: bool = False) -> NewEvent:
    payload = JobAccepted(
        account="acme",
        tool=tool,
        args=args,
        idempotency_key=f"key-{uuid.uuid4()}",
        spends=spends,
        max_attempts=1 if spends else 3,
    )
    return _new(payload, "token:acme-agent")


def _started(attempt: int, worker: str = "w-1") -> NewEvent:
    lease = datetime.now(UTC) + timedelta(seconds=30)
    return _new(
        WorkStarted(attempt=attempt, worker=worker, lease_expires_at=lease), f"worker:{worker}"
    )


def _error(code: Code, retryable: bool = False) -> ErrorInfo:
    return ErrorInfo(
        code=code,
        dependency="tracker",
        operation="read issue metadata",
        retryable=retryable,
        message="I could not read the linked tracker item.",
    )


def _by_worker(payload: AnyPayload) -> NewEvent:
    return _new(payload, "worker:w-1")


@dataclass(frozen=True)
class Seeded:
    url: str
    store: SqlStore
    streams: dict[str, str]  # a name for the test -> stream id

    def stream(self, name: str) -> list[RecordedEvent]:
        return self.store.read_stream(self.streams[name])

    def event(self, name: str, version: int) -> RecordedEvent:
        return self.stream(name)[version - 1]


def record_workload(store: SqlStore) -> dict[str, str]:
    """Six streams, appended in interleaved steps as the API, workers and an operator would."""
    streams = {
        "charge": job_stream(uuid.uuid4()),  # accepted, started, succeeded
        "retried": job_stream(uuid.uuid4()),  # accepted, started, retry, started, failed
        "refused": job_stream(uuid.uuid4()),  # refused
        "partial": job_stream(uuid.uuid4()),  # accepted, started + partial
        "declined": job_stream(uuid.uuid4()),  # accepted + started + declined in one append
        "brake": f"brake-{uuid.uuid4()}",  # pulled, released
    }
    brake_id = streams["brake"].removeprefix("brake-")
    due = datetime.now(UTC) + timedelta(seconds=5)
    refused = JobRefused(
        account="acme", tool="tracker.read_issue", error=_error(Code.INPUT_MISSING)
    )
    retry = WorkRetryScheduled(attempt=1, error=_error(Code.SOURCE_UNRELIABLE, True), due_at=due)
    pulled = BrakePulled(
        brake_id=brake_id, scope="tool:payments.charge", reason="card fraud", operator="olga"
    )
    released = BrakeReleased(brake_id=brake_id, reason="resolved", operator="olga")
    steps: list[tuple[str, list[NewEvent]]] = [
        ("charge", [_accepted("payments.charge", {"amount_cents": 1200}, spends=True)]),
        ("retried", [_accepted("tracker.read_issue", {"issue_ref": "T-7"})]),
        ("refused", [_new(refused, "token:acme-agent")]),
        ("charge", [_started(1)]),
        ("brake", [_new(pulled, "operator:olga")]),
        ("retried", [_started(1)]),
        ("partial", [_accepted("tracker.bulk_label", {"issues": ["T-1", "T-2"]})]),
        ("retried", [_by_worker(retry)]),
        ("charge", [_by_worker(WorkSucceeded(attempt=1, result={"charge_id": "ch_1"}))]),
        ("brake", [_new(released, "operator:olga")]),
        ("retried", [_started(2)]),
        ("partial", [_started(1), _by_worker(WorkPartial(attempt=1, processed=1, total=2))]),
        (
            "declined",
            [
                _accepted("tracker.close_issue", {"issue_ref": "T-3"}),
                _started(1),
                _by_worker(WorkDeclined(attempt=1, reason="already closed")),
            ],
        ),
        ("retried", [_by_worker(WorkFailed(attempt=2, error=_error(Code.ACCESS_DENIED)))]),
    ]
    versions = dict.fromkeys(streams, 0)
    for name, new_events in steps:
        store.append(streams[name], new_events, versions[name])
        versions[name] += len(new_events)
    return streams


WORKLOAD_EVENTS = 17


@pytest.fixture
def seeded(database_url: str, store: SqlStore) -> Seeded:
    streams = record_workload(store)
    report = verify_store(store)
    assert report.ok, report.problems
    assert report.events_checked == WORKLOAD_EVENTS
    return Seeded(url=database_url, store=store, streams=streams)


# --- going around the triggers, as a superuser could ----------------------------------------


@contextmanager
def around_the_triggers(url: str) -> Iterator[Connection]:
    """A transaction in which UPDATE and DELETE on `events` are not refused: on Postgres a
    superuser session in replica mode (row triggers do not fire); on SQLite, whoever holds the
    file drops the triggers, tampers, and puts them back so the schema looks untouched."""
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            triggers: list[str] = []
            if conn.dialect.name == "postgresql":
                conn.exec_driver_sql("SET LOCAL session_replication_role = replica")
            else:
                found = conn.exec_driver_sql(
                    "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'"
                ).all()
                for name, statement in found:
                    conn.exec_driver_sql(f"DROP TRIGGER {name}")
                    triggers.append(statement)
            yield conn
            for statement in triggers:  # put them back exactly as they were
                conn.exec_driver_sql(statement)
    finally:
        engine.dispose()


def written_at(conn: Connection, *positions: int) -> list[int]:
    """Where the events at these ledger positions were written (on Postgres the sequencer
    gives ledger positions after commit; SQLite writes each event at its ledger position)."""
    if conn.dialect.name != "postgresql":
        return list(positions)
    query = select(ledger_order.c.position, ledger_order.c.event_position).where(
        ledger_order.c.position.in_(positions)
    )
    found = dict(conn.execute(query).tuples().all())
    return [int(found[p]) for p in positions]


def tamper_set(url: str, position: int, **values: Any) -> None:
    with around_the_triggers(url) as conn:
        (written,) = written_at(conn, position)
        changed = conn.execute(update(events).where(events.c.position == written).values(values))
        assert changed.rowcount == 1


def tamper_delete(url: str, *positions: int, orders: bool = True) -> None:
    """Delete the events at these ledger positions and, unless `orders` is False (a forger who
    knows only `events`), their order rows on Postgres."""
    with around_the_triggers(url) as conn:
        written = written_at(conn, *positions)
        gone = conn.execute(delete(events).where(events.c.position.in_(written)))
        assert gone.rowcount == len(positions)
        if orders and conn.dialect.name == "postgresql":
            conn.execute(delete(ledger_order).where(ledger_order.c.position.in_(positions)))


def place(conn: Connection, position: int, written: int, ledger_hash: str) -> None:
    """On Postgres, an order row by hand: the event written at `written` put at `position`
    (SQLite writes each event at its ledger position: nothing to do)."""
    if conn.dialect.name == "postgresql":
        values = {"event_position": written, "ledger_hash": ledger_hash, "sequenced_at": now()}
        conn.execute(insert(ledger_order).values(position=position, **values))


def postgres(seeded: Seeded) -> bool:
    return seeded.store.dialect == "postgresql"


def saved_digest(store: SqlStore) -> Digest:
    """A digest taken now and read back as if from the auditor's own storage."""
    return Digest.loads(digest_of(store).dumps())


# --- d. a history re-hashed end to end ------------------------------------------------------


def forge(ledger: Seeded, name: str, version: int, data: dict[str, Any]) -> None:
    """Replace one event's data and re-hash it and every later event of its stream, from the
    stored fields, exactly as the ledger would have hashed them."""
    stream = ledger.stream(name)
    prev_hash = stream[version - 2].hash if version > 1 else None
    with around_the_triggers(ledger.url) as conn:
        for event in stream[version - 1 :]:
            content = data if event.stream_version == version else event.data
            new_hash = event_hash(
                event_id=str(event.event_id),
                stream_id=event.stream_id,
                stream_version=event.stream_version,
                type=event.type,
                data=content,
                code=event.code.value if event.code else None,
                actor=event.actor,
                recorded_at=event.recorded_at,
                prev_hash=prev_hash,
            )
            conn.execute(
                update(events)
                .where(events.c.position == event.position)
                .values(data=content, prev_hash=prev_hash, hash=new_hash)
            )
            prev_hash = new_hash
    relink(ledger.url)


def rehash(ledger: Seeded, event: RecordedEvent, data: dict[str, Any]) -> None:
    """Replace one event's data and its hash with the hash of the new content (its stream's
    later events, if any, keep their links: pick a stream's last event to leave them whole),
    and nothing else: the Merkle tree and the ledger-wide chain are left to notice."""
    new_hash = event_hash(
        event_id=str(event.event_id),
        stream_id=event.stream_id,
        stream_version=event.stream_version,
        type=event.type,
        data=data,
        code=event.code.value if event.code else None,
        actor=event.actor,
        recorded_at=event.recorded_at,
        prev_hash=event.prev_hash,
    )
    with around_the_triggers(ledger.url) as conn:
        changed = conn.execute(
            update(events)
            .where(events.c.position == event.position)
            .values(data=data, hash=new_hash)
        )
        assert changed.rowcount == 1


def relink(url: str) -> None:
    """Recompute the ledger-wide chain over whatever the table now holds, as a thorough
    forger would after cutting, inserting or rewriting events. On Postgres the order rows are
    made again, dense from 1 in write order, and the sequencer's head with them. The Merkle
    tree too (`retree`): only a tree head kept out of the forger's reach tells."""
    with around_the_triggers(url) as conn:
        rows = conn.execute(select(events.c.position, events.c.hash).order_by(events.c.position))
        if conn.dialect.name == "postgresql":
            _reorder(conn, rows.tuples().all())
        else:
            link: str | None = None
            for position, hash_ in rows.all():
                link = ledger_link(link, hash_)
                conn.execute(
                    update(events).where(events.c.position == position).values(ledger_hash=link)
                )
    retree(url)


def retree(url: str) -> None:
    """Rebuild the Merkle tree over whatever ledger order now holds, as a forger who owns the
    database would: the stored subtrees, the tree's row (SQLite: its gaps), and on Postgres
    no tick head left but the tree's row (the sequencer goes on from it)."""
    with around_the_triggers(url) as conn:
        start = conn.execute(select(ledger_tree.c.start_position)).scalar_one()
        rows = conn.execute(
            select(ledger_events.c.position, ledger_events.c.hash)
            .where(ledger_events.c.position >= start)
            .order_by(ledger_events.c.position)
        ).all()
        growth = append_leaves(
            Frontier.empty(), (event_leaf_hash(h) for _, h in rows), leaves=False
        )
        conn.execute(delete(merkle_nodes))
        if growth.to_store:
            conn.execute(
                insert(merkle_nodes),
                [{"level": s.level, "idx": s.index, "hash": s.hash} for s in growth.to_store],
            )
        if conn.dialect.name == "postgresql":
            conn.execute(delete(ledger_ticks))
        else:
            conn.execute(delete(merkle_gaps))
            skipped = 0
            for leaf, (position, _) in enumerate(rows):
                if position - start - leaf != skipped:
                    skipped = position - start - leaf
                    conn.execute(insert(merkle_gaps).values(position=position, skipped=skipped))
        frontier = growth.frontier
        conn.execute(
            update(ledger_tree).values(tree_size=frontier.size, frontier=b"".join(frontier.hashes))
        )


def chain_problems(report: VerifyReport) -> list[Problem]:
    """What the chains and digests found (the Merkle tree's findings left out)."""
    return [p for p in report.problems if p.kind is not ProblemKind.MERKLE_MISMATCH]


def tree_problems(report: VerifyReport) -> list[Problem]:
    """What the Merkle tree's check found (`merkle_mismatch`)."""
    return [p for p in report.problems if p.kind is ProblemKind.MERKLE_MISMATCH]


def _reorder(conn: Connection, rows: list[tuple[int, str]]) -> None:
    conn.execute(delete(ledger_order))
    link: str | None = None
    for place, (written, hash_) in enumerate(rows, start=1):
        link = ledger_link(link, hash_)
        conn.execute(
            insert(ledger_order).values(
                position=place, event_position=written, ledger_hash=link, sequenced_at=now()
            )
        )
    # Where the sequencer stands, as if it had given these positions itself.
    conn.execute(delete(ledger_ticks))
    conn.execute(update(ledger_sequencer).values(head=len(rows), head_hash=link))

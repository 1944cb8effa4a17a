"""Tampering with the recorded events, on SQLite and on Postgres (DESIGN §2).

The events table refuses UPDATE, DELETE (and on Postgres TRUNCATE) from everyone. Someone who
goes around that (a superuser disabling the triggers, anyone holding the SQLite file) is caught
by the per-stream hash chain: an edited row, or a row deleted in the middle of a stream. What
the chain alone cannot see (a deleted last row, a history re-hashed end to end) is caught
against a digest taken earlier and kept elsewhere.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from sqlalchemy import Connection, delete, text, update

from ledger.chain import ProblemKind, event_hash
from ledger.codes import Code
from ledger.digest import Digest
from ledger.error_info import ErrorInfo
from ledger.errors import DigestError, ImmutableLedgerError
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
    WorkLateOutcome,
    WorkPartial,
    WorkRetryScheduled,
    WorkStarted,
    WorkSucceeded,
    job_stream,
)
from ledger.persistence.audit import take_digest, verify_ledger
from ledger.persistence.engine import make_engine
from ledger.persistence.errors import translated
from ledger.persistence.open import open_store
from ledger.persistence.schema import events, immutability_ddl
from ledger.persistence.store import EventStore

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
class Ledger:
    url: str
    store: EventStore
    streams: dict[str, str]  # a name for the test -> stream id

    def stream(self, name: str) -> list[RecordedEvent]:
        return self.store.read_stream(self.streams[name])

    def event(self, name: str, version: int) -> RecordedEvent:
        return self.stream(name)[version - 1]


def record_workload(store: EventStore) -> dict[str, str]:
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
def ledger(database_url: str, store: EventStore) -> Ledger:
    streams = record_workload(store)
    report = verify_ledger(store)
    assert report.ok, report.problems
    assert report.events_checked == WORKLOAD_EVENTS
    return Ledger(url=database_url, store=store, streams=streams)


# --- going around the triggers, as a superuser could ----------------------------------------


@contextmanager
def around_the_triggers(url: str) -> Iterator[Connection]:
    """A transaction in which UPDATE and DELETE on `events` are not refused: on Postgres a
    superuser session in replica mode (row triggers do not fire); on SQLite, whoever holds the
    file drops the triggers, tampers, and puts them back so the schema looks untouched."""
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.exec_driver_sql("SET LOCAL session_replication_role = replica")
            else:
                conn.exec_driver_sql("DROP TRIGGER events_no_update")
                conn.exec_driver_sql("DROP TRIGGER events_no_delete")
            yield conn
            if conn.dialect.name == "sqlite":
                for statement in immutability_ddl("sqlite"):
                    conn.exec_driver_sql(statement)
    finally:
        engine.dispose()


def tamper_set(url: str, position: int, **values: Any) -> None:
    with around_the_triggers(url) as conn:
        changed = conn.execute(update(events).where(events.c.position == position).values(values))
        assert changed.rowcount == 1


def tamper_delete(url: str, *positions: int) -> None:
    with around_the_triggers(url) as conn:
        gone = conn.execute(delete(events).where(events.c.position.in_(positions)))
        assert gone.rowcount == len(positions)


def saved_digest(store: EventStore) -> Digest:
    """A digest taken now and read back as if from the auditor's own storage."""
    return Digest.loads(take_digest(store).dumps())


# --- a. the database refuses changes to recorded events -------------------------------------


REFUSED_STATEMENTS = [
    "UPDATE events SET actor = 'mallory' WHERE position = :position",
    "UPDATE events SET data = data WHERE position = :position",  # even a no-op update
    "DELETE FROM events WHERE position = :position",
    "DELETE FROM events",
]


@pytest.mark.parametrize("statement", REFUSED_STATEMENTS)
def test_updates_and_deletes_of_events_are_refused(ledger: Ledger, statement: str) -> None:
    before = ledger.stream("retried")
    target = before[2].position
    refused = pytest.raises(ImmutableLedgerError, match="append-only")
    with refused, translated(), ledger.store.engine.begin() as conn:
        conn.execute(text(statement), {"position": target})
    assert ledger.stream("retried") == before
    assert verify_ledger(ledger.store).events_checked == WORKLOAD_EVENTS


@pytest.mark.postgres
def test_truncate_of_events_is_refused_on_postgres(pg_database: str) -> None:
    store = open_store(pg_database)
    try:
        record_workload(store)
        refused = pytest.raises(ImmutableLedgerError, match="append-only")
        with refused, translated(), store.engine.begin() as conn:
            conn.execute(text("TRUNCATE events"))
        report = verify_ledger(store)
        assert (report.ok, report.events_checked) == (True, WORKLOAD_EVENTS)
    finally:
        store.engine.dispose()


# --- b. an edited row breaks its own hash ---------------------------------------------------


Edit = Callable[[RecordedEvent], dict[str, Any]]
EDITS: dict[str, Edit] = {
    "data": lambda e: {"data": e.data | {"attempt": 7}},
    "actor": lambda e: {"actor": "worker:mallory"},
    "code": lambda e: {"code": Code.TOOL_CRASHED.value},
    "recorded_at": lambda e: {"recorded_at": e.recorded_at - timedelta(hours=1)},
    "type": lambda e: {"type": "work.started"},
    "event_id": lambda e: {"event_id": uuid.uuid4()},
    "hash": lambda e: {"hash": "0" * 64},
}


@pytest.mark.parametrize("field", sorted(EDITS))
def test_an_edited_row_is_found_at_its_position(ledger: Ledger, field: str) -> None:
    edited = ledger.event("retried", 3)  # work.retry_scheduled, in the middle of its stream
    tamper_set(ledger.url, edited.position, **EDITS[field](edited))
    assert ledger.event("retried", 3) != edited

    report = verify_ledger(ledger.store)

    assert not report.ok
    assert report.first_problem is not None
    assert report.first_problem.kind is ProblemKind.HASH_MISMATCH
    assert report.first_problem.position == edited.position
    assert report.first_problem.stream_id == ledger.streams["retried"]
    assert report.first_problem.stream_version == 3
    if field == "hash":  # the next event's prev_hash no longer points at it either
        follower = ledger.event("retried", 4)
        assert [(p.kind, p.position) for p in report.problems[1:]] == [
            (ProblemKind.CHAIN_BROKEN, follower.position)
        ]
    else:
        assert len(report.problems) == 1, report.problems
    assert report.events_checked == WORKLOAD_EVENTS


# --- c. deleted rows --------------------------------------------------------------------------


def test_a_row_deleted_mid_stream_is_found_at_the_event_after_the_gap(ledger: Ledger) -> None:
    gone = ledger.event("retried", 3)
    after_gap = ledger.event("retried", 4)
    tamper_delete(ledger.url, gone.position)

    report = verify_ledger(ledger.store)

    assert [(p.kind, p.stream_id, p.stream_version, p.position) for p in report.problems] == [
        (ProblemKind.VERSION_GAP, ledger.streams["retried"], 4, after_gap.position)
    ]
    assert report.first_problem == report.problems[0]
    assert report.events_checked == WORKLOAD_EVENTS - 1


@pytest.mark.parametrize(
    ("name", "deleted_versions"),
    [("retried", [5]), ("declined", [3]), ("refused", [1]), ("charge", [2, 3])],
    ids=["last-row", "terminal-of-batch", "whole-stream", "last-two-rows"],
)
def test_a_truncated_stream_is_found_only_against_an_earlier_digest(
    ledger: Ledger, name: str, deleted_versions: list[int]
) -> None:
    digest = saved_digest(ledger.store)
    head_version = len(ledger.stream(name))
    positions = [ledger.event(name, v).position for v in deleted_versions]
    tamper_delete(ledger.url, *positions)

    alone = verify_ledger(ledger.store)
    assert alone.ok, "the chain alone cannot see a missing tail"
    assert alone.events_checked == WORKLOAD_EVENTS - len(positions)

    report = verify_ledger(ledger.store, digest=digest)
    found = {(p.kind, p.stream_id, p.stream_version, p.position) for p in report.problems}
    assert found == {
        (ProblemKind.DIGEST_COUNT, "", 0, None),  # the span lost len(positions) events
        (ProblemKind.DIGEST_TRUNCATED, ledger.streams[name], head_version, None),
    }
    assert report.first_problem in report.problems


def test_a_row_slipped_into_a_gap_of_positions_is_found_against_a_digest(
    ledger: Ledger,
) -> None:
    """INSERT is allowed, and a failed append leaves a gap in positions: a forger who fills
    the gap with a whole new, self-consistent stream is caught by the digest's span."""
    gap = ledger.store.last_position() + 1
    with around_the_triggers(ledger.url) as conn:  # burn a position, as a failed insert does
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT nextval(pg_get_serial_sequence('events', 'position'))"))
        else:
            conn.execute(text("UPDATE sqlite_sequence SET seq = seq + 1 WHERE name = 'events'"))
    honest = job_stream(uuid.uuid4())
    ledger.store.append(honest, [_accepted("tracker.read_issue", {"issue_ref": "T-9"})], 0)
    digest = saved_digest(ledger.store)
    assert digest.position > gap  # the digest's span covers the gap
    assert verify_ledger(ledger.store, digest=digest).ok

    forged_stream = job_stream(uuid.uuid4())
    forged = _accepted("tracker.read_issue", {"issue_ref": "T-forged"})
    fields: dict[str, Any] = {
        "event_id": forged.event_id,
        "stream_id": forged_stream,
        "stream_version": 1,
        "type": "job.accepted",
        "data": forged.payload.model_dump(mode="json"),
        "code": None,
        "actor": forged.actor,
        "recorded_at": datetime.now(UTC),
        "prev_hash": None,
    }
    fields["hash"] = event_hash(**(fields | {"event_id": str(forged.event_id)}))
    with around_the_triggers(ledger.url) as conn:
        conn.execute(events.insert().values(position=gap, **fields))

    alone = verify_ledger(ledger.store)
    assert alone.ok, "the forged stream is internally consistent"
    report = verify_ledger(ledger.store, digest=digest)
    kinds = {(p.kind, p.position) for p in report.problems}
    assert kinds == {(ProblemKind.DIGEST_EXTRA, gap), (ProblemKind.DIGEST_COUNT, None)}
    assert report.first_problem is not None and report.first_problem.position == gap


# --- d. a history re-hashed end to end ------------------------------------------------------


def forge(ledger: Ledger, name: str, version: int, data: dict[str, Any]) -> None:
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


def test_a_rehashed_history_is_self_consistent_but_contradicts_an_earlier_digest(
    ledger: Ledger,
) -> None:
    digest = saved_digest(ledger.store)
    original = ledger.stream("retried")
    forged_data = original[2].data | {"due_at": "2001-01-01T00:00:00Z", "attempt": 2}
    forge(ledger, "retried", 3, forged_data)

    forged = ledger.stream("retried")
    assert forged[2].data == forged_data
    assert [e.hash for e in forged[:2]] == [e.hash for e in original[:2]]
    assert all(f.hash != o.hash for f, o in zip(forged[2:], original[2:], strict=True))

    alone = verify_ledger(ledger.store)
    assert alone.ok, alone.problems  # the forgery is internally consistent
    assert alone.events_checked == WORKLOAD_EVENTS

    report = verify_ledger(ledger.store, digest=digest)
    head = forged[-1]
    assert [(p.kind, p.stream_id, p.stream_version, p.position) for p in report.problems] == [
        (ProblemKind.DIGEST_MISMATCH, ledger.streams["retried"], head.stream_version, head.position)
    ]


def test_a_ledger_that_only_grew_still_matches_its_digest(ledger: Ledger) -> None:
    """The control for the digest tests: honest appends after a digest are no problem."""
    digest = saved_digest(ledger.store)
    late = WorkLateOutcome(
        attempt=1, outcome_type="work.succeeded", outcome={"result": {"charge_id": "ch_1"}}
    )
    ledger.store.append(ledger.streams["charge"], [_by_worker(late)], 3)
    fresh = job_stream(uuid.uuid4())
    ledger.store.append(fresh, [_accepted("tracker.read_issue", {"issue_ref": "T-8"})], 0)

    report = verify_ledger(ledger.store, digest=digest)
    assert report.ok, report.problems
    assert report.events_checked == WORKLOAD_EVENTS + 2


# --- a digest edited by hand ----------------------------------------------------------------


DocEdit = Callable[[dict[str, Any], str], None]


def _set_head_hash(doc: dict[str, Any], stream: str) -> None:
    doc["heads"][stream][1] = "f" * 64


def _set_head_version(doc: dict[str, Any], stream: str) -> None:
    doc["heads"][stream][0] -= 1


def _drop_stream(doc: dict[str, Any], stream: str) -> None:
    del doc["heads"][stream]


def _add_stream(doc: dict[str, Any], stream: str) -> None:
    doc["heads"][job_stream(uuid.uuid4())] = [1, "a" * 64]


def _set_root(doc: dict[str, Any], stream: str) -> None:
    doc["root"] = "0" * 64


def _set_format(doc: dict[str, Any], stream: str) -> None:
    doc["format"] = "some-other-digest/1"


def _heads_not_a_mapping(doc: dict[str, Any], stream: str) -> None:
    doc["heads"] = [[stream, 1, "a" * 64]]


def _head_not_a_pair(doc: dict[str, Any], stream: str) -> None:
    doc["heads"][stream] = [5]


DIGEST_EDITS: dict[str, DocEdit] = {
    "head-hash": _set_head_hash,
    "head-version": _set_head_version,
    "dropped-stream": _drop_stream,
    "added-stream": _add_stream,
    "root": _set_root,
    "format": _set_format,
    "heads-not-a-mapping": _heads_not_a_mapping,
    "head-not-a-pair": _head_not_a_pair,
}


def test_a_saved_digest_reads_back_unchanged(ledger: Ledger) -> None:
    digest = take_digest(ledger.store)
    assert Digest.loads(digest.dumps()) == digest
    assert digest.events == WORKLOAD_EVENTS
    assert len(digest.heads) == len(ledger.streams)
    assert digest.heads[ledger.streams["retried"]] == (5, ledger.event("retried", 5).hash)


@pytest.mark.parametrize("edit", sorted(DIGEST_EDITS))
def test_a_digest_edited_by_hand_is_refused(ledger: Ledger, edit: str) -> None:
    doc = orjson.loads(take_digest(ledger.store).dumps())
    DIGEST_EDITS[edit](doc, ledger.streams["retried"])
    with pytest.raises(DigestError):
        Digest.loads(orjson.dumps(doc))


@pytest.mark.parametrize("raw", [b"", b"{", b"[]", b"null", b'"digest"'])
def test_a_digest_that_is_not_a_digest_document_is_refused(raw: bytes) -> None:
    with pytest.raises(DigestError):
        Digest.loads(raw)


def test_a_truncated_digest_file_is_refused(ledger: Ledger) -> None:
    raw = take_digest(ledger.store).dumps()
    with pytest.raises(DigestError):
        Digest.loads(raw[: len(raw) // 2])

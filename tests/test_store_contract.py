"""The event store's contract, run against every backend (SQLite and Postgres)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from ledger.chain import ProblemKind
from ledger.codes import Code, Status
from ledger.errors import (
    AlreadyTerminalError,
    ConcurrencyError,
    DuplicateEventError,
    InvalidEventError,
)
from ledger.events import JobAccepted, NewEvent, job_id_of
from ledger.persistence.audit import verify_ledger
from ledger.persistence.schema import jobs
from ledger.persistence.store import NO_STREAM, EventStore
from tests.factories import accepted, failed, fresh_job_stream, new, started, succeeded


def job_row_status(store: EventStore, stream_id: str) -> str | None:
    with store.reading() as conn:
        query = select(jobs.c.status).where(jobs.c.job_id == job_id_of(stream_id))
        status: str | None = conn.execute(query).scalar_one_or_none()
        return status


def test_append_to_new_stream_numbers_versions_and_positions(store: EventStore) -> None:
    stream = fresh_job_stream()
    recorded = store.append(stream, [accepted(), started()], NO_STREAM)
    assert [e.stream_version for e in recorded] == [1, 2]
    assert recorded[0].position < recorded[1].position
    assert recorded[0].prev_hash is None
    assert recorded[1].prev_hash == recorded[0].hash
    assert store.read_stream(stream) == recorded


def test_stale_expected_version_is_a_typed_conflict_and_writes_nothing(store: EventStore) -> None:
    stream = fresh_job_stream()
    store.append(stream, [accepted()], NO_STREAM)
    with pytest.raises(ConcurrencyError) as info:
        store.append(stream, [started()], NO_STREAM)
    assert (info.value.expected, info.value.actual) == (0, 1)
    with pytest.raises(ConcurrencyError):
        store.append(stream, [started()], 5)
    assert len(store.read_stream(stream)) == 1


def test_expected_version_none_appends_at_the_head(store: EventStore) -> None:
    stream = fresh_job_stream()
    store.append(stream, [accepted()])
    recorded = store.append(stream, [started()])
    assert recorded[0].stream_version == 2


def test_unknown_stream_reads_empty_and_empty_append_is_a_no_op(store: EventStore) -> None:
    assert store.read_stream(fresh_job_stream()) == []
    assert store.append(fresh_job_stream(), []) == []
    assert store.last_position() == 0


def test_read_after_returns_later_events_in_position_order(store: EventStore) -> None:
    streams = [fresh_job_stream() for _ in range(5)]
    for stream in streams:
        store.append(stream, [accepted()], NO_STREAM)
    for stream in streams:
        store.append(stream, [started()], 1)
    everything = store.read_after(0, limit=100)
    assert len(everything) == 10
    positions = [e.position for e in everything]
    assert positions == sorted(positions)
    assert store.last_position() == positions[-1]
    page = store.read_after(positions[3], limit=4)
    assert [e.position for e in page] == positions[4:8]


def test_second_terminal_event_is_refused_and_nothing_changes(store: EventStore) -> None:
    stream = fresh_job_stream()
    store.append(stream, [accepted(), started(), succeeded(answer=42)], NO_STREAM)
    # Expected version is right, so only the one-terminal-event invariant stands in the way.
    with pytest.raises(AlreadyTerminalError):
        store.append(stream, [failed()], 3)
    assert len(store.read_stream(stream)) == 3
    assert job_row_status(store, stream) == Status.SUCCEEDED


def test_an_event_id_is_recorded_once(store: EventStore) -> None:
    stream = fresh_job_stream()
    first = accepted()
    store.append(stream, [first], NO_STREAM)
    retry = NewEvent(payload=started().payload, actor="w", event_id=first.event_id)
    with pytest.raises(DuplicateEventError):
        store.append(stream, [retry], 1)
    assert len(store.read_stream(stream)) == 1


def test_a_failed_transaction_leaves_no_event_and_no_read_model_row(store: EventStore) -> None:
    committed, rolled_back = fresh_job_stream(), fresh_job_stream()
    store.append(committed, [accepted()], NO_STREAM)
    with pytest.raises(ConcurrencyError), store.transaction() as tx:
        tx.append(rolled_back, [accepted()], NO_STREAM)
        tx.append(committed, [started()], NO_STREAM)  # stale: the whole unit rolls back
    assert store.read_stream(rolled_back) == []
    assert job_row_status(store, rolled_back) is None
    assert job_row_status(store, committed) == Status.QUEUED


def test_read_model_follows_the_stream_in_the_same_transaction(store: EventStore) -> None:
    stream = fresh_job_stream()
    store.append(stream, [accepted()], NO_STREAM)
    assert job_row_status(store, stream) == Status.QUEUED
    store.append(stream, [started()], 1)
    assert job_row_status(store, stream) == Status.RUNNING
    store.append(stream, [failed(Code.SOURCE_UNRELIABLE)], 2)
    with store.reading() as conn:
        row = conn.execute(select(jobs).where(jobs.c.job_id == job_id_of(stream))).one()
    assert (row.status, row.code, row.terminal, row.attempts) == (
        "failed",
        "SOURCE_UNRELIABLE",
        True,
        1,
    )


def test_code_has_its_own_column(store: EventStore) -> None:
    stream = fresh_job_stream()
    recorded = store.append(stream, [accepted(), started(), failed(Code.ACCESS_DENIED)])
    assert [e.code for e in recorded] == [None, None, Code.ACCESS_DENIED]
    assert [e.code for e in store.read_stream(stream)] == [None, None, Code.ACCESS_DENIED]


def test_data_that_cannot_be_stored_is_a_typed_error(store: EventStore) -> None:
    stream = fresh_job_stream()
    bad = JobAccepted(account="acme", tool="t", args={"text": "nul\x00byte"})
    with pytest.raises(InvalidEventError):
        store.append(stream, [new(bad)], NO_STREAM)
    assert store.read_stream(stream) == []


def test_stored_events_verify_and_an_honest_ledger_has_no_problem(store: EventStore) -> None:
    for _ in range(3):
        stream = fresh_job_stream()
        store.append(stream, [accepted(args_note="ünïcode ✓")], NO_STREAM)
        store.append(stream, [started(), succeeded(items=[1, 2.5, None, {"k": "v"}])], 1)
    report = verify_ledger(store)
    assert report.ok, report.problems
    assert (report.events_checked, report.streams_checked) == (9, 3)
    assert ProblemKind.HASH_MISMATCH not in {p.kind for p in report.problems}

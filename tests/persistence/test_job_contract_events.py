"""The job contract (`JobReads`, `JobWrites`), its events: appending and reading them. Runs on
every store (memory, SQLite, Postgres) through `any_store`; `test_job_contract_reads.py`
covers the read models and the questions a job's way asks."""

from __future__ import annotations

import threading

import pytest

from ledger.chain import ProblemKind
from ledger.chain_check import verify_chain
from ledger.clock import now
from ledger.codes import Code, Status
from ledger.errors import (
    AlreadyTerminalError,
    ConcurrencyError,
    DuplicateEventError,
    IdempotencyKeyTakenError,
    InvalidEventError,
)
from ledger.events import JobAccepted, NewEvent, job_id_of
from ledger.persistence.appends import NO_STREAM
from ledger.persistence.base import Store
from tests.factories import accepted, failed, fresh_job_stream, new, rebuild, started, succeeded
from tests.store_helpers import read_after


def job_status(store: Store, stream_id: str) -> Status | None:
    with store.reading() as reads:
        view = reads.job(job_id_of(stream_id))
    return view.status if view else None


def test_append_to_new_stream_numbers_versions_and_positions(any_store: Store) -> None:
    stream = fresh_job_stream()
    recorded = any_store.append(stream, [accepted(), started()], NO_STREAM).events
    assert [e.stream_version for e in recorded] == [1, 2]
    assert recorded[0].position < recorded[1].position
    assert recorded[0].prev_hash is None
    assert recorded[1].prev_hash == recorded[0].hash
    assert any_store.read_stream(stream) == recorded


def test_append_returns_the_view_it_projected(any_store: Store) -> None:
    stream = fresh_job_stream()
    first = any_store.append(stream, [accepted()], NO_STREAM)
    assert first.job.status is Status.QUEUED and first.job.stream_version == 1
    second = any_store.append(stream, [started()], 1)
    assert second.job.status is Status.RUNNING and second.job.attempts == 1
    with any_store.reading() as reads:
        assert reads.job(job_id_of(stream)) == second.job
    with pytest.raises(TypeError):
        _ = second.brake  # a job stream projects a job view, nothing else


def test_stale_expected_version_is_a_typed_conflict_and_writes_nothing(any_store: Store) -> None:
    stream = fresh_job_stream()
    any_store.append(stream, [accepted()], NO_STREAM)
    with pytest.raises(ConcurrencyError) as info:
        any_store.append(stream, [started()], NO_STREAM)
    assert (info.value.expected, info.value.actual) == (0, 1)
    with pytest.raises(ConcurrencyError):
        any_store.append(stream, [started()], 5)
    assert len(any_store.read_stream(stream)) == 1


def test_expected_version_none_appends_at_the_head(any_store: Store) -> None:
    stream = fresh_job_stream()
    any_store.append(stream, [accepted()])
    assert any_store.append(stream, [started()]).events[0].stream_version == 2


def test_unknown_stream_reads_empty_and_empty_append_is_a_no_op(any_store: Store) -> None:
    assert any_store.read_stream(fresh_job_stream()) == []
    assert any_store.append(fresh_job_stream(), []).events == []
    assert any_store.last_position() == 0


def test_read_after_returns_later_events_in_position_order(any_store: Store) -> None:
    streams = [fresh_job_stream() for _ in range(5)]
    for stream in streams:
        any_store.append(stream, [accepted()], NO_STREAM)
    for stream in streams:
        any_store.append(stream, [started()], 1)
    everything = read_after(any_store, 0, limit=100)
    positions = [e.position for e in everything]
    assert len(everything) == 10 and positions == sorted(positions)
    assert any_store.last_position() == positions[-1]
    assert [e.position for e in read_after(any_store, positions[3], limit=4)] == positions[4:8]
    assert list(any_store.iter_events(batch=3)) == everything


def test_second_terminal_event_is_refused_and_nothing_changes(any_store: Store) -> None:
    stream = fresh_job_stream()
    any_store.append(stream, [accepted(), started(), succeeded(answer=42)], NO_STREAM)
    # Expected version is right, so only the one-terminal-event invariant stands in the way.
    with pytest.raises(AlreadyTerminalError):
        any_store.append(stream, [failed()], 3)
    assert len(any_store.read_stream(stream)) == 3
    assert job_status(any_store, stream) is Status.SUCCEEDED


def test_an_event_id_is_recorded_once(any_store: Store) -> None:
    stream = fresh_job_stream()
    first = accepted()
    any_store.append(stream, [first], NO_STREAM)
    retry = NewEvent(payload=started().payload, actor="w", event_id=first.event_id)
    with pytest.raises(DuplicateEventError):
        any_store.append(stream, [retry], 1)
    assert len(any_store.read_stream(stream)) == 1


def test_one_job_per_idempotency_key_and_account(any_store: Store) -> None:
    keyed = JobAccepted(account="acme", tool="t.x", args={}, idempotency_key="k-1")
    any_store.append(fresh_job_stream(), [new(keyed)], NO_STREAM)
    with pytest.raises(IdempotencyKeyTakenError):
        any_store.append(fresh_job_stream(), [new(keyed)], NO_STREAM)
    other = keyed.model_copy(update={"account": "beta"})
    any_store.append(fresh_job_stream(), [new(other)], NO_STREAM)  # another account's key
    with any_store.reading() as reads:
        assert reads.job_by_idempotency_key("acme", "k-1") is not None
        assert reads.job_by_idempotency_key("acme", "k-2") is None


def test_a_failed_transaction_leaves_no_event_and_no_read_model_row(any_store: Store) -> None:
    committed, rolled_back = fresh_job_stream(), fresh_job_stream()
    any_store.append(committed, [accepted()], NO_STREAM)
    with pytest.raises(ConcurrencyError), any_store.transaction() as tx:
        tx.append(rolled_back, [accepted()], NO_STREAM)
        tx.start_lease(job_id_of(rolled_back), 1, "w", now())
        tx.append(committed, [started()], NO_STREAM)  # stale: the whole unit rolls back
    assert any_store.read_stream(rolled_back) == []
    assert job_status(any_store, rolled_back) is None
    assert job_status(any_store, committed) is Status.QUEUED
    in_order = read_after(any_store, 0)
    assert [e.stream_id for e in in_order] == [committed]
    with any_store.in_order() as reads:
        assert reads.last_position() == in_order[0].position


def test_read_model_follows_the_stream_in_the_same_transaction(any_store: Store) -> None:
    stream = fresh_job_stream()
    any_store.append(stream, [accepted()], NO_STREAM)
    assert job_status(any_store, stream) is Status.QUEUED
    any_store.append(stream, [started()], 1)
    assert job_status(any_store, stream) is Status.RUNNING
    any_store.append(stream, [failed(Code.SOURCE_UNRELIABLE)], 2)
    with any_store.reading() as reads:
        view = reads.job(job_id_of(stream))
    assert view is not None
    assert (view.status, view.code, view.terminal, view.attempts) == (
        Status.FAILED,
        Code.SOURCE_UNRELIABLE,
        True,
        1,
    )


def test_code_has_its_own_column(any_store: Store) -> None:
    stream = fresh_job_stream()
    recorded = any_store.append(stream, [accepted(), started(), failed(Code.ACCESS_DENIED)]).events
    assert [e.code for e in recorded] == [None, None, Code.ACCESS_DENIED]
    assert [e.code for e in any_store.read_stream(stream)] == [None, None, Code.ACCESS_DENIED]


def test_data_that_cannot_be_stored_is_a_typed_error(any_store: Store) -> None:
    stream = fresh_job_stream()
    bad = JobAccepted(account="acme", tool="t", args={"text": "nul\x00byte"})
    with pytest.raises(InvalidEventError):
        any_store.append(stream, [new(bad)], NO_STREAM)
    assert any_store.read_stream(stream) == []


def test_stored_events_verify_and_an_honest_ledger_has_no_problem(any_store: Store) -> None:
    for _ in range(3):
        stream = fresh_job_stream()
        any_store.append(stream, [accepted(args_note="ünïcode ✓")], NO_STREAM)
        any_store.append(stream, [started(), succeeded(items=[1, 2.5, None, {"k": "v"}])], 1)
    report = verify_chain(any_store.iter_events())
    assert report.ok, report.problems
    assert (report.events_checked, report.streams_checked) == (9, 3)
    assert ProblemKind.HASH_MISMATCH not in {p.kind for p in report.problems}


def test_heads_name_every_streams_last_event(any_store: Store) -> None:
    one, two = fresh_job_stream(), fresh_job_stream()
    any_store.append(one, [accepted(), started()], NO_STREAM)
    last = any_store.append(two, [accepted()], NO_STREAM).events[-1]
    with any_store.in_order() as reads:
        heads = reads.heads()
    assert heads.position == read_after(any_store, 0)[-1].position and heads.events == 3
    assert heads.heads[one] == (2, any_store.read_stream(one)[-1].hash)
    assert heads.heads[two] == (1, last.hash)


def test_concurrent_appends_to_one_stream_let_exactly_one_win(any_store: Store) -> None:
    stream = fresh_job_stream()
    any_store.append(stream, [accepted()], NO_STREAM)
    outcomes: list[str] = []
    gate = threading.Barrier(4)

    def race() -> None:
        gate.wait()
        try:
            any_store.append(stream, [started()], 1)
            outcomes.append("won")
        except ConcurrencyError:
            outcomes.append("lost")

    threads = [threading.Thread(target=race) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["lost", "lost", "lost", "won"]
    assert len(any_store.read_stream(stream)) == 2


def test_rebuild_reproduces_the_live_read_models(any_store: Store) -> None:
    streams = [fresh_job_stream() for _ in range(3)]
    any_store.append(streams[0], [accepted(), started(), succeeded()], NO_STREAM)
    any_store.append(streams[1], [accepted(), started()], NO_STREAM)
    any_store.append(streams[2], [accepted()], NO_STREAM)
    with any_store.reading() as reads:
        live = [reads.job(job_id_of(s)) for s in streams]
    assert rebuild(any_store).events_replayed == 6
    with any_store.reading() as reads:
        assert [reads.job(job_id_of(s)) for s in streams] == live

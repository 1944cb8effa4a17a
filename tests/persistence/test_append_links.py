"""The ledger-wide chain on Postgres (migration 0014): no writer links at write; the sequencer
links every committed row, whoever wrote it (the append function, the general append, a plain
INSERT), in ledger order, into one chain. Everything here runs as the application role."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import psycopg
import pytest
from click.testing import CliRunner
from psycopg.types.json import Jsonb

from cli.main import cli
from ledger.brakes import brake_stream
from ledger.chain import event_rows, ledger_link
from ledger.clock import now
from ledger.events import BrakePulled, BrakeReleased, NewEvent, RecordedEvent, TokenCreated
from ledger.persistence import job_batch
from ledger.persistence.appends import AppendStatus, JobAppend, JobAppended
from ledger.persistence.sql_store import SqlStore
from tests.concurrent_writers import psycopg_dsn
from tests.factories import accepted, new, open_sql, started, verify_store

pytestmark = pytest.mark.postgres


@pytest.fixture
def app_store(pg_app_url: str) -> Iterator[SqlStore]:
    with open_sql(pg_app_url) as store:
        yield store


def token_created(token_id: str) -> NewEvent:
    created = TokenCreated(
        token_id=token_id, account="acme", role="agent", token_hash="ab" * 32, tools=None
    )
    return new(created, "operator:alice")


def insert_token(url: str, ledger_hash: str | None = None) -> int:
    """Another writer: one plain INSERT of a new token's event, with a `ledger_hash` of its own
    or without one; returns its position."""
    token_id = uuid.uuid4().hex
    (row,) = event_rows(f"token-{token_id}", [token_created(token_id)], 0, None, now())
    if ledger_hash is not None:
        row["ledger_hash"] = ledger_hash
    values = [Jsonb(v) if k == "data" else v for k, v in row.items()]
    statement = (
        f"INSERT INTO events ({', '.join(row)}) VALUES ({', '.join(['%s'] * len(row))}) "
        "RETURNING position"
    )
    with psycopg.connect(psycopg_dsn(url), autocommit=True) as conn:
        found = conn.execute(statement.encode(), values).fetchone()
    assert found is not None
    return int(found[0])


def recorded_by(results: list[JobAppended]) -> list[RecordedEvent]:
    assert [r.status for r in results] == [AppendStatus.OK] * len(results)
    return [e for r in results if r.appended for e in r.appended.events]


def test_every_writers_rows_are_linked_into_one_chain_by_the_sequencer(
    app_store: SqlStore, pg_app_url: str
) -> None:
    """The function, the general append and a plain INSERT write no link; the sequencer links
    all of them, after commit, into one chain in one dense order."""
    first, second, third = (str(uuid.uuid4()) for _ in range(3))
    batch = app_store.append_jobs(
        [JobAppend(first, [accepted()], None), JobAppend(second, [accepted(), started()], None)]
    )
    answered = recorded_by(batch)
    token_id = uuid.uuid4().hex
    app_store.append(f"token-{token_id}", [token_created(token_id)], 0)  # the general append
    inserted = insert_token(pg_app_url)  # a plain INSERT
    next_batch = [JobAppend(first, [started()], batch[0].job), JobAppend(third, [accepted()], None)]
    answered += recorded_by(app_store.append_jobs(next_batch))
    assert {e.ledger_hash for e in answered} == {None}  # nothing is linked at write

    recorded = list(app_store.iter_events())
    assert [e.position for e in recorded] == list(range(1, 8))  # dense, from the first
    prev = None
    for event in recorded:  # one chain, whoever wrote each row
        assert event.ledger_hash == ledger_link(prev, event.hash), event.position
        prev = event.ledger_hash
    assert verify_store(app_store).ok
    written = {e.stored_position for e in recorded}  # every row written, each placed once
    assert written == {e.position for e in answered} | {inserted} | {
        e.stored_position for e in recorded if e.stream_id == f"token-{token_id}"
    }


def test_a_link_a_writer_supplies_is_not_the_ledgers(
    app_store: SqlStore, pg_app_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`events.ledger_hash` is no longer where the chain lives on Postgres: a value a writer
    puts there is ignored, the sequencer's link in ledger order stands, and verify is clean."""
    recorded_by(app_store.append_jobs([JobAppend(str(uuid.uuid4()), [accepted()], None)]))
    forged = insert_token(pg_app_url, ledger_hash="0" * 64)
    recorded_by(app_store.append_jobs([JobAppend(str(uuid.uuid4()), [accepted()], None)]))

    (event,) = [e for e in app_store.iter_events() if e.stored_position == forged]
    assert event.ledger_hash != "0" * 64
    assert verify_store(app_store).ok
    monkeypatch.setenv("OUTCOMES_DATABASE_URL", pg_app_url)
    result = CliRunner().invoke(cli, ["audit", "verify", "--json"], catch_exceptions=False)
    found = orjson.loads(result.stdout)
    assert found["problems"] == []  # the chain is whole (the plain INSERT made no read model)
    assert found["read_models"]["problems"][0]["table"] == "tokens"


def brake_item(template: dict[str, Any], brake_id: str, event: NewEvent, prev: Any) -> Any:
    """An item appending a brake's event (the store appends those another way; here it shows the
    function's brake answers follow whatever a call appends before asking again)."""
    version, prev_hash = (prev["stream_version"], prev["hash"]) if prev else (0, None)
    (row,) = event_rows(brake_stream(brake_id), [event], version, prev_hash, now())
    job = template["job"] | {"job_id": str(uuid.uuid4())}
    events = [orjson.loads(orjson.dumps(row | {"event_id": str(row["event_id"])}))]
    return template | {"stream_id": row["stream_id"], "events": events, "job": job}


def test_brake_answers_follow_the_pulls_and_releases_of_the_same_call(pg_app_url: str) -> None:
    """Within one call the brake check is asked once per scopes, and again after the call
    appends a pull, or any event after a pull in its stream (its release)."""
    scopes = ("global",)
    submits = [
        job_batch.plan(JobAppend(str(uuid.uuid4()), [accepted()], None, brake_scopes=scopes), now())
        for _ in range(3)
    ]
    items = orjson.loads(job_batch.payload(submits))
    brake_id = str(uuid.uuid4())
    pull = new(BrakePulled(brake_id=brake_id, scope="global", reason="r", operator="olga"))
    pulled = brake_item(items[0] | {"brake_scopes": None}, brake_id, pull, None)
    release = new(BrakeReleased(brake_id=brake_id, reason="r", operator="olga"))
    released = brake_item(pulled, brake_id, release, pulled["events"][0])
    call = [items[0], pulled, items[1], released, items[2]]
    with psycopg.connect(psycopg_dsn(pg_app_url)) as conn:
        found = conn.execute(job_batch.CALL.encode(), [orjson.dumps(call).decode()]).fetchone()
        conn.rollback()
    assert found is not None
    answers = found[0]
    assert [a["status"] for a in answers] == ["ok", "ok", "braked", "ok", "ok"]
    assert [b["brake_id"] for b in answers[2]["brakes"]] == [brake_id]

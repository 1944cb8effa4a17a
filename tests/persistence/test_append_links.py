"""The ledger-wide chain on Postgres (migration 0008): the append function links the events it
inserts itself, the trigger links every other writer's rows (those inserted without a
`ledger_hash`), and the two make one chain. A `ledger_hash` a writer supplies stands, so a wrong
one must be what `audit verify` reports. Everything here runs as the application role."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import psycopg
import pytest
from click.testing import CliRunner
from psycopg.types.json import Jsonb

from cli.errors import EXIT_PROBLEM
from cli.main import cli
from ledger.brakes import brake_stream
from ledger.chain import ProblemKind, event_rows, ledger_link
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


def test_the_function_and_the_trigger_link_one_chain(app_store: SqlStore, pg_app_url: str) -> None:
    first, second, third = (str(uuid.uuid4()) for _ in range(3))
    batch = app_store.append_jobs(
        [JobAppend(first, [accepted()], None), JobAppend(second, [accepted(), started()], None)]
    )
    answered = recorded_by(batch)
    token_id = uuid.uuid4().hex
    app_store.append(f"token-{token_id}", [token_created(token_id)], 0)  # the general append
    insert_token(pg_app_url)  # a plain INSERT
    next_batch = [JobAppend(first, [started()], batch[0].job), JobAppend(third, [accepted()], None)]
    answered += recorded_by(app_store.append_jobs(next_batch))

    recorded = list(app_store.iter_events())
    assert len(recorded) == 7
    prev = None
    for event in recorded:  # one chain, whoever linked each row
        assert event.ledger_hash == ledger_link(prev, event.hash), event.position
        prev = event.ledger_hash
    assert verify_store(app_store).ok
    stored = {e.position: e.ledger_hash for e in recorded}  # the function answers what it stored
    assert [(e.position, e.ledger_hash) for e in answered] == [
        (e.position, stored[e.position]) for e in answered
    ]


def test_the_trigger_links_a_row_inserted_without_a_link(
    app_store: SqlStore, pg_app_url: str
) -> None:
    recorded_by(app_store.append_jobs([JobAppend(str(uuid.uuid4()), [accepted()], None)]))
    position = insert_token(pg_app_url)
    *_, before, row = app_store.iter_events()
    assert row.position == position
    assert row.ledger_hash == ledger_link(before.ledger_hash, row.hash)


def test_a_wrong_link_a_writer_supplies_is_reported_by_verify(
    app_store: SqlStore, pg_app_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trigger no longer overwrites a supplied `ledger_hash`: the application role can
    record a wrong one, and `outcomes audit verify` names its position. The next link follows
    from the stored value, so the chain breaks there only."""
    recorded_by(app_store.append_jobs([JobAppend(str(uuid.uuid4()), [accepted()], None)]))
    forged = insert_token(pg_app_url, ledger_hash="0" * 64)
    recorded_by(app_store.append_jobs([JobAppend(str(uuid.uuid4()), [accepted()], None)]))

    report = verify_store(app_store)
    assert [(p.kind, p.position) for p in report.problems] == [
        (ProblemKind.LEDGER_CHAIN_BROKEN, forged)
    ]
    monkeypatch.setenv("OUTCOMES_DATABASE_URL", pg_app_url)
    result = CliRunner().invoke(cli, ["audit", "verify", "--json"], catch_exceptions=False)
    assert result.exit_code == EXIT_PROBLEM
    found = orjson.loads(result.stdout)
    assert [(p["kind"], p["position"]) for p in found["problems"]] == [
        ("ledger_chain_broken", forged)
    ]


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

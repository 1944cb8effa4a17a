"""`outcomes audit verify` proves the read models (jobs, brakes, tokens): it folds the events
in memory and compares every stored row, column and key of the JSON view with the fold. An
edited field, a deleted row and an inserted row each exit non-zero naming the table, the key
and the field, on SQLite and Postgres; an untouched ledger after a mixed workload verifies."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from sqlalchemy import Table, insert, select, update

from cli.errors import EXIT_PROBLEM
from ledger.events import TokenCreated
from ledger.persistence.appends import JobAppend, LeaseChange
from ledger.persistence.engine import make_engine
from ledger.persistence.schema import brakes, jobs, tokens
from ledger.persistence.sql_store import SqlStore
from tests.factories import accepted, started, succeeded
from tests.plugins.cli import Invoke
from tests.rebuild_workload import SEEDS, Workload, run_workload

TABLES: dict[str, Table] = {"jobs": jobs, "brakes": brakes, "tokens": tokens}


@dataclass(frozen=True)
class Ledger:
    url: str
    work: Workload
    batched_done: str  # a job closed through `append_jobs` (Postgres: the one-statement path)


def batched_jobs(store: SqlStore) -> str:
    """Three jobs written as the services write them: queued, running, succeeded."""
    ids = [str(uuid.uuid4()) for _ in range(3)]
    decided = store.append_jobs([JobAppend(i, [accepted()], None) for i in ids])
    lease = datetime.now(UTC) + timedelta(seconds=30)
    claim = LeaseChange("start", 1, "w-1", lease)
    claimed = store.append_jobs(
        [
            JobAppend(i, [started()], d.job, lease=claim)
            for i, d in zip(ids[1:], decided[1:], strict=True)
        ]
    )
    store.append_jobs(
        [JobAppend(ids[2], [succeeded(charge_id="ch_1")], claimed[1].job, LeaseChange("drop", 1))]
    )
    return ids[2]


@pytest.fixture
def mixed(database_url: str, store: SqlStore) -> Ledger:
    work = run_workload(store, random.Random(SEEDS[0]))
    return Ledger(database_url, work, batched_jobs(store))


def verify(outcomes: Invoke) -> tuple[int, dict[str, Any], str]:
    result = outcomes("audit", "verify", "--json", ok=False)
    return result.exit_code, orjson.loads(result.stdout), result.stderr


def test_an_untouched_ledger_verifies(outcomes: Invoke, mixed: Ledger) -> None:
    work = mixed.work
    kinds = {p.kind for p in work.jobs}
    assert {"queued", "running", "retrying", "succeeded", "failed", "refused"} <= kinds
    assert {len(p.events) for p in work.brakes} == {1, 2}  # held and released brakes
    assert {len(p.events) for p in work.tokens} == {1, 2}  # live and revoked tokens
    code, body, _ = verify(outcomes)
    assert (code, body["ok"], body["read_models"]["problems"]) == (0, True, [])
    assert body["read_models"]["rows_checked"] == {
        "jobs": len(work.jobs) + 3,
        "brakes": len(work.brakes),
        "tokens": len(work.tokens),
        "webhooks": 0,
    }
    assert "the read models are what the events make" in outcomes("audit", "verify").output


# --- one edit per table: a careful tamperer changes the column and the view alike ----------


def an_active_brake(ledger: Ledger) -> str:
    return next(p.key for p in ledger.work.brakes if len(p.events) == 1)


def an_agent_token(ledger: Ledger) -> str:
    def is_live_agent(events: list[Any]) -> bool:
        created = events[0].payload
        return len(events) == 1 and isinstance(created, TokenCreated) and created.role == "agent"

    return next(p.key for p in ledger.work.tokens if is_live_agent(p.events))


# table -> (the row to edit, the column, its new value, the value the events make)
EDITS: dict[str, tuple[Callable[[Ledger], str], str, Any, Any]] = {
    "jobs": (lambda ledger: ledger.batched_done, "status", "failed", "succeeded"),
    "brakes": (an_active_brake, "active", False, True),
    "tokens": (an_agent_token, "role", "operator", "agent"),
}


def edit(url: str, table: str, key: str, **values: Any) -> None:
    """Set these values in the row's view, and in its columns where it has them."""
    found = TABLES[table]
    pk = next(iter(found.primary_key.columns))
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            view = conn.execute(select(found.c.view).where(pk == key)).scalar_one()
            columns = {name: v for name, v in values.items() if name in found.c}
            changed = conn.execute(
                update(found).where(pk == key).values({**columns, "view": view | values})
            )
            assert changed.rowcount == 1
    finally:
        engine.dispose()


@pytest.mark.parametrize("table", sorted(EDITS))
def test_an_edited_field_is_named(outcomes: Invoke, mixed: Ledger, table: str) -> None:
    pick, column, value, truth = EDITS[table]
    key = pick(mixed)
    edit(mixed.url, table, key, **{column: value})
    code, body, stderr = verify(outcomes)
    assert (code, body["ok"], body["first_broken_position"]) == (EXIT_PROBLEM, False, None)
    found = {
        (p["table"], p["key"], p["field"], p["stored"], p["expected"], p["kind"])
        for p in body["read_models"]["problems"]
    }
    assert found == {
        (table, key, name, value, truth, "field_differs") for name in (column, f"view.{column}")
    }
    reason = stderr.strip().splitlines()[-1]
    assert reason.startswith(f"outcomes: read model {table} {key}: ")
    assert column in reason


def test_a_secret_field_is_named_but_never_shown(outcomes: Invoke, mixed: Ledger) -> None:
    key = mixed.batched_done
    edit(mixed.url, "jobs", key, args={"issue_ref": "hunter2-secret"})
    result = outcomes("audit", "verify", "--json", ok=False)
    assert result.exit_code == EXIT_PROBLEM
    (problem,) = orjson.loads(result.stdout)["read_models"]["problems"]
    assert (problem["key"], problem["field"]) == (key, "view.args")
    assert problem["stored"] == problem["expected"] == "(withheld)"
    people = outcomes("audit", "verify", ok=False)
    for output in (result.stdout, result.stderr, people.output):
        assert "hunter2" not in output and "T-1" not in output


# --- rows deleted and inserted ---------------------------------------------------------------


@pytest.mark.parametrize("table", sorted(TABLES))
def test_a_deleted_row_is_named(outcomes: Invoke, mixed: Ledger, table: str) -> None:
    key = EDITS[table][0](mixed)
    found = TABLES[table]
    engine = make_engine(mixed.url)
    with engine.begin() as conn:
        pk = next(iter(found.primary_key.columns))
        assert conn.execute(found.delete().where(pk == key)).rowcount == 1
    engine.dispose()
    code, body, stderr = verify(outcomes)
    assert (code, body["ok"]) == (EXIT_PROBLEM, False)
    assert [(p["kind"], p["table"], p["key"]) for p in body["read_models"]["problems"]] == [
        ("row_missing", table, key)
    ]
    assert f"read model {table} {key}: row missing" in stderr


@pytest.mark.parametrize("table", sorted(TABLES))
def test_an_inserted_row_is_named(outcomes: Invoke, mixed: Ledger, table: str) -> None:
    found = TABLES[table]
    pk = next(iter(found.primary_key.columns))
    ghost = str(uuid.uuid4())
    engine = make_engine(mixed.url)
    with engine.begin() as conn:
        row = dict(conn.execute(select(found).where(pk == EDITS[table][0](mixed))).mappings().one())
        row[pk.name] = ghost
        row["view"] = row["view"] | {pk.name: ghost}
        if table == "jobs":
            row["idempotency_key"] = None  # unique per account
        if table == "tokens":
            row["token_hash"] = "0" * 64  # unique
        conn.execute(insert(found).values(row))
    engine.dispose()
    code, body, stderr = verify(outcomes)
    assert (code, body["ok"]) == (EXIT_PROBLEM, False)
    assert [(p["kind"], p["table"], p["key"]) for p in body["read_models"]["problems"]] == [
        ("row_extra", table, ghost)
    ]
    assert f"read model {table} {ghost}: extra row" in stderr


def test_leases_are_not_a_read_model(outcomes: Invoke, mixed: Ledger) -> None:
    """Heartbeats move leases without an event, and the reconciler ends them: not compared."""
    engine = make_engine(mixed.url)
    with engine.begin() as conn:
        assert conn.exec_driver_sql("DELETE FROM leases").rowcount > 0
    engine.dispose()
    assert verify(outcomes)[0] == 0

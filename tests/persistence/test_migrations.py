"""Alembic's migrations build exactly the schema that `ledger.persistence.schema` declares.

Every test starts from an empty database (a fresh Postgres database, or a new SQLite file),
runs `ledger.persistence.migrate` on it and compares what the database then holds with the
declared metadata: tables and columns through Alembic's autogenerate comparison, indexes
(uniqueness and partial WHERE clauses included) through the database's own catalog.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from pprint import pformat
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, Engine, Index, func, insert, inspect, select, text, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.schema import CreateIndex, CreateTable, DropIndex
from sqlalchemy.sql import Executable

from ledger.chain import event_rows
from ledger.chain_check import verify_chain
from ledger.clock import now
from ledger.events import NewEvent, TokenCreated
from ledger.persistence import migrate
from ledger.persistence.engine import make_engine
from ledger.persistence.projections import default_projections
from ledger.persistence.schema import (
    PARTITION_GUARDS,
    PARTITIONED_WITHOUT_PK,
    events,
    metadata,
)
from ledger.persistence.sql_store import SqlStore
from tests.databases import create_database, drop_database, pg_url, require_postgres, unique_name
from tests.store_helpers import head_revision

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
LEDGER_TABLES = frozenset(metadata.tables)
VERSION_TABLE = "alembic_version"
DECLARED_INDEXES: list[Index] = sorted(
    (index for table in metadata.tables.values() for index in table.indexes),
    key=lambda index: str(index.name),
)
# The tables with a key (the counts' insert-only deltas have none: writers only append to them).
KEYED = {name: table for name, table in metadata.tables.items() if table.primary_key.columns}
PRIMARY_KEYS = frozenset(str(table.primary_key.name) for table in KEYED.values())
# What Postgres alone has and the declared metadata leaves out: the writing transaction's id,
# filled by its default and read by the sequencer only (migration 0014).
POSTGRES_ONLY_COLUMNS = {("events", "txid")}
POSTGRES_ONLY_INDEXES = {"ix_events_txid"}
# Postgres partitions `events` and `ledger_order` (0018): the declared unique indexes that do
# not hold the partition key are each partition's own (their guards), not the parent's.
SQLITE_ONLY_INDEXES = PARTITION_GUARDS
EXPECTED_TRIGGERS = {
    "postgresql": {"events_no_update_delete", "events_no_truncate", "events_findings_counted"},
    "sqlite": {"events_no_update", "events_no_delete", "events_findings_counted"},
}
IMMUTABLE_FUNCTION = "outcomes_events_immutable"


# --- fixtures -----------------------------------------------------------------------------


@pytest.fixture(params=BACKENDS)
def empty_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """An engine on a database with no tables at all (never cloned from a migrated template)."""
    if request.param == "sqlite":
        engine = make_engine(f"sqlite:///{tmp_path / 'empty.db'}")
        yield engine
        engine.dispose()
        return
    require_postgres()
    name = unique_name("outcomes_mig")
    create_database(name)
    engine = make_engine(pg_url(name))
    try:
        yield engine
    finally:
        engine.dispose()
        drop_database(name)


@pytest.fixture
def migrated_engine(empty_engine: Engine) -> Engine:
    assert table_names(empty_engine) == set(), "the database must start empty"
    migrate.upgrade(empty_engine)
    return empty_engine


# --- reading the catalog ------------------------------------------------------------------


def table_names(engine: Engine) -> set[str]:
    """The tables, partitions left out (they are the partitioned tables' own)."""
    with engine.connect() as conn:
        return set(inspect(conn).get_table_names()) - partition_names(conn)


def partition_names(conn: Connection) -> set[str]:
    if conn.dialect.name != "postgresql":
        return set()
    query = "SELECT c.relname FROM pg_class c WHERE c.relispartition"
    return {row[0] for row in conn.execute(text(query))}


def declared_indexes(conn: Connection) -> list[Index]:
    if conn.dialect.name != "postgresql":
        return DECLARED_INDEXES
    return [index for index in DECLARED_INDEXES if index.name not in SQLITE_ONLY_INDEXES]


def schema_diff(engine: Engine) -> list[Any]:
    """Alembic's autogenerate diff between the database and the declared metadata."""
    with engine.connect() as conn:
        partitions = partition_names(conn)
        postgres = conn.dialect.name == "postgresql"

        def _declared_or_compared(
            item: Any, name: str | None, kind: str, reflected: bool, compare_to: Any
        ) -> bool:
            if kind == "table" and name in partitions:
                return False
            if postgres and kind == "index" and name in SQLITE_ONLY_INDEXES:
                return False
            if kind == "column" and (item.table.name, name) in POSTGRES_ONLY_COLUMNS:
                return False
            return not (kind == "index" and name in POSTGRES_ONLY_INDEXES)

        context = MigrationContext.configure(
            conn,
            opts={
                "compare_type": True,
                "compare_server_default": True,
                "include_object": _declared_or_compared,
            },
        )
        return list(compare_metadata(context, metadata))


def squash(sql: str) -> str:
    # A table a migration made again (batch mode's copy, renamed) keeps its name quoted.
    sql = re.sub(r'^(\s*CREATE TABLE )"(\w+)"', r"\1\2", sql)
    return re.sub(r"\s+", " ", sql).strip()


def index_definitions(conn: Connection) -> dict[str, str]:
    """Every index on the ledger's tables, as the database itself describes it."""
    rows: list[tuple[str, str]]
    if conn.dialect.name == "postgresql":
        query = (
            "SELECT indexname, indexdef FROM pg_indexes "
            "WHERE schemaname = current_schema() AND tablename = ANY(:tables)"
        )
        rows = [
            (name, sql)
            for name, sql in conn.execute(text(query), {"tables": sorted(LEDGER_TABLES)})
            if name not in POSTGRES_ONLY_INDEXES
        ]
    else:
        # Automatic indexes (sql IS NULL) back PRIMARY KEY / UNIQUE table constraints.
        query = "SELECT name, sql, tbl_name FROM sqlite_master WHERE type = 'index'"
        rows = [
            (name, sql)
            for name, sql, table in conn.execute(text(query))
            if sql is not None and table in LEDGER_TABLES
        ]
    return {name: squash(sql) for name, sql in rows}


def declared_index_definitions(conn: Connection) -> dict[str, str]:
    """What `CreateIndex(index)`, compiled for this dialect, makes the database record.

    Each migrated index is dropped and re-created from the metadata inside a savepoint that is
    rolled back, so the database normalises both versions the same way (Postgres rewrites
    `type IN (...)` to `= ANY (ARRAY[...])`; SQLite keeps the statement's text)."""
    savepoint = conn.begin_nested()
    try:
        for index in declared_indexes(conn):
            conn.execute(DropIndex(index, if_exists=True))
            conn.execute(CreateIndex(index))
        return index_definitions(conn)
    finally:
        savepoint.rollback()


def index_mismatches(conn: Connection) -> dict[str, tuple[str | None, str | None]]:
    """{index name: (migrated definition, declared definition)} wherever the two differ."""
    migrated = index_definitions(conn)
    declared = declared_index_definitions(conn)
    return {
        name: (migrated.get(name), declared.get(name))
        for name in sorted(migrated.keys() | declared.keys())
        if migrated.get(name) != declared.get(name)
    }


def trigger_names(conn: Connection) -> set[str]:
    if conn.dialect.name == "postgresql":
        query = (
            "SELECT t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "WHERE c.relname = 'events' AND NOT t.tgisinternal AND t.tgenabled <> 'D'"
        )
    else:
        query = "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'events'"
    return {row[0] for row in conn.execute(text(query))}


def catalog(conn: Connection) -> list[tuple[Any, ...]]:
    """Everything the migration creates, as the catalog lists it (for before/after checks)."""
    if conn.dialect.name == "sqlite":
        query = "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
        return [tuple(row) for row in conn.execute(text(query))]
    columns = conn.execute(
        text(
            "SELECT table_name, column_name, data_type, is_nullable, column_default "
            "FROM information_schema.columns WHERE table_schema = current_schema() "
            "ORDER BY table_name, ordinal_position"
        )
    )
    indexes = conn.execute(
        text(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
            "ORDER BY indexname"
        )
    )
    triggers = conn.execute(
        text("SELECT tgname, tgenabled FROM pg_trigger WHERE NOT tgisinternal ORDER BY tgname")
    )
    return [tuple(row) for result in (columns, indexes, triggers) for row in result]


def immutable_function_exists(conn: Connection) -> bool:
    query = text("SELECT count(*) FROM pg_proc WHERE proname = :name")
    return bool(conn.execute(query, {"name": IMMUTABLE_FUNCTION}).scalar_one())


def record_one_event(engine: Engine) -> None:
    store = SqlStore(engine, default_projections())
    created = TokenCreated(
        token_id="t-1", account="acme", role="agent", token_hash="ab" * 32, tools=None
    )
    store.append("token-t-1", [NewEvent(payload=created, actor="operator:alice")], 0)


def event_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(events)).scalar_one())


# --- tests ---------------------------------------------------------------------------------


def test_upgrade_builds_exactly_the_declared_tables(migrated_engine: Engine) -> None:
    assert table_names(migrated_engine) == LEDGER_TABLES | {VERSION_TABLE}
    diff = schema_diff(migrated_engine)
    assert diff == [], f"migrations differ from ledger.persistence.schema:\n{pformat(diff)}"


def test_indexes_match_the_declared_metadata(migrated_engine: Engine) -> None:
    with migrated_engine.connect() as conn, conn.begin():
        declared_names = {str(index.name) for index in declared_indexes(conn)}
        migrated = index_definitions(conn)
        inspector = inspect(conn)
        if conn.dialect.name == "postgresql":
            # Postgres lists the primary keys' indexes too, under the constraints' names;
            # a partitioned table's key must hold the partition key, which ledger_order's
            # position does not: its partitions keep it unique each (0018).
            without = {f"pk_{name}" for name in PARTITIONED_WITHOUT_PK}
            assert set(migrated) == declared_names | (PRIMARY_KEYS - without)
            for name, declared in KEYED.items():
                expected = None if name in PARTITIONED_WITHOUT_PK else declared.primary_key.name
                assert inspector.get_pk_constraint(name)["name"] == expected
        else:
            assert set(migrated) == declared_names
        for index in declared_indexes(conn):
            table = index.table
            assert table is not None
            reflected = {ix["name"]: ix for ix in inspector.get_indexes(table.name)}
            assert bool(reflected[index.name]["unique"]) == index.unique, index.name
            assert reflected[index.name]["column_names"] == [c.name for c in index.columns]
            partial = index.dialect_options[conn.dialect.name]["where"] is not None
            assert (" WHERE " in migrated[str(index.name)]) == partial, index.name
        mismatches = index_mismatches(conn)
    assert mismatches == {}, f"(migrated, declared) index definitions:\n{pformat(mismatches)}"


def test_sqlite_tables_match_the_declared_ddl(tmp_path: Path) -> None:
    """SQLite keeps each CREATE TABLE's text: it must be what the metadata compiles to
    (this covers what autogenerate does not compare, such as AUTOINCREMENT on `events`)."""
    engine = make_engine(f"sqlite:///{tmp_path / 'ddl.db'}")
    try:
        migrate.upgrade(engine)
        with engine.connect() as conn:
            query = text("SELECT name, sql FROM sqlite_master WHERE type = 'table'")
            stored = {name: sql for name, sql in conn.execute(query)}
            for table in metadata.sorted_tables:
                declared = squash(str(CreateTable(table).compile(dialect=conn.dialect)))
                assert squash(stored[table.name]) == declared, table.name
            assert "AUTOINCREMENT" in stored["events"]
    finally:
        engine.dispose()


def test_index_comparison_detects_drift(migrated_engine: Engine) -> None:
    """A changed WHERE clause and a lost UNIQUE are both reported, and nothing else is."""
    wrong_where = "true" if migrated_engine.dialect.name == "postgresql" else "1"
    with migrated_engine.connect() as conn, conn.begin():
        conn.execute(text("DROP INDEX ix_jobs_open"))
        conn.execute(
            text(
                "CREATE INDEX ix_jobs_open ON jobs (status, updated_at) "
                f"WHERE terminal = {wrong_where}"
            )
        )
        conn.execute(text("DROP INDEX uq_tokens_token_hash"))
        conn.execute(text("CREATE INDEX uq_tokens_token_hash ON tokens (token_hash)"))
        mismatches = index_mismatches(conn)
    assert set(mismatches) == {"ix_jobs_open", "uq_tokens_token_hash"}


def test_immutability_triggers_exist_and_fire(migrated_engine: Engine) -> None:
    dialect = migrated_engine.dialect.name
    with migrated_engine.connect() as conn:
        assert trigger_names(conn) == EXPECTED_TRIGGERS[dialect]
    record_one_event(migrated_engine)
    refused: list[Executable] = [update(events).values(actor="mallory"), events.delete()]
    if dialect == "postgresql":
        refused.append(text("TRUNCATE events"))
    for statement in refused:
        with pytest.raises(DBAPIError, match="append-only"), migrated_engine.begin() as conn:
            conn.execute(statement)
    assert event_count(migrated_engine) == 1


def test_revision_is_head_and_a_second_upgrade_changes_nothing(migrated_engine: Engine) -> None:
    head = head_revision()
    assert head is not None
    assert migrate.current_revision(migrated_engine) == head
    record_one_event(migrated_engine)
    with migrated_engine.connect() as conn:
        before = catalog(conn)
    migrate.upgrade(migrated_engine)
    with migrated_engine.connect() as conn:
        assert catalog(conn) == before
    assert migrate.current_revision(migrated_engine) == head
    assert event_count(migrated_engine) == 1


def test_the_ledger_chain_links_events_recorded_before_it(empty_engine: Engine) -> None:
    """0005 chains the events an older ledger already holds, in position order; the events
    appended afterwards (by the trigger on Postgres, the store on SQLite) extend that chain."""
    migrate.upgrade(empty_engine, "0004")
    rows = event_rows("token-old", [_token_event(f"t-{i}") for i in range(3)], 0, None, now())
    with empty_engine.begin() as conn:  # an 0004 ledger has no ledger_hash column yet
        conn.execute(insert(events), rows)
    migrate.upgrade(empty_engine)
    store = SqlStore(empty_engine, default_projections())
    store.append("token-new", [_token_event("t-new")], 0)
    recorded = list(store.iter_events())
    assert [e.ledger_hash is not None for e in recorded] == [True] * 4
    assert verify_chain(recorded).ok
    forged = [
        e.model_copy(update={"ledger_hash": "0" * 64}) if e.position == 2 else e for e in recorded
    ]
    assert [p.position for p in verify_chain(forged).problems] == [2, 3]


def _token_event(token_id: str) -> NewEvent:
    created = TokenCreated(
        token_id=token_id, account="acme", role="agent", token_hash=token_id * 8, tools=None
    )
    return NewEvent(payload=created, actor="operator:alice")


def test_downgrade_to_base_removes_everything_then_upgrade_again(migrated_engine: Engine) -> None:
    migrate.downgrade(migrated_engine, "base")
    assert table_names(migrated_engine) - {VERSION_TABLE} == set()
    assert migrate.current_revision(migrated_engine) is None
    with migrated_engine.connect() as conn:
        assert index_definitions(conn) == {}
        assert trigger_names(conn) == set()
        if conn.dialect.name == "postgresql":
            assert not immutable_function_exists(conn)

    migrate.upgrade(migrated_engine)
    assert migrate.current_revision(migrated_engine) == head_revision()
    assert table_names(migrated_engine) == LEDGER_TABLES | {VERSION_TABLE}
    diff = schema_diff(migrated_engine)
    assert diff == [], f"re-upgrade differs from ledger.persistence.schema:\n{pformat(diff)}"
    with migrated_engine.connect() as conn, conn.begin():
        assert trigger_names(conn) == EXPECTED_TRIGGERS[conn.dialect.name]
        assert index_mismatches(conn) == {}
        if conn.dialect.name == "postgresql":
            assert immutable_function_exists(conn)


POSTGRES_ONLY = [pytest.param("postgres", marks=pytest.mark.postgres)]


APPEND_FUNCTION = "SELECT pg_get_functiondef('outcomes_append_jobs'::regproc)"
CHAIN_TRIGGER = "SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgname = 'events_ledger_chain'"


def append_function_and_chain_trigger(conn: Connection) -> tuple[str, str]:
    return tuple(
        conn.execute(text(query)).scalar_one() for query in (APPEND_FUNCTION, CHAIN_TRIGGER)
    )


@pytest.mark.parametrize("empty_engine", POSTGRES_ONLY, indirect=True)
def test_0008_downgrades_to_0007s_function_and_trigger_exactly(empty_engine: Engine) -> None:
    """0008 replaces the append function and makes the chain trigger conditional (the function
    links its own events); going back leaves exactly what 0007 made."""
    migrate.upgrade(empty_engine, "0007")
    with empty_engine.connect() as conn:
        before = append_function_and_chain_trigger(conn)
    assert "WHEN" not in before[1]
    migrate.upgrade(empty_engine, "0008")
    with empty_engine.connect() as conn:
        function, trigger = append_function_and_chain_trigger(conn)
    assert function != before[0]
    assert "WHEN ((new.ledger_hash IS NULL))" in trigger
    migrate.downgrade(empty_engine, "0007")
    with empty_engine.connect() as conn:
        assert append_function_and_chain_trigger(conn) == before


@pytest.mark.parametrize("empty_engine", POSTGRES_ONLY, indirect=True)
def test_0009_changes_only_the_idempotency_lookup_and_downgrades_to_0008s_function(
    empty_engine: Engine,
) -> None:
    """0009 caches the keyed submit's idempotency lookup (tests/persistence/test_append_plans.py
    says which index it takes); going back leaves exactly 0008's function."""
    migrate.upgrade(empty_engine, "0008")
    with empty_engine.connect() as conn:
        before = append_function_and_chain_trigger(conn)
    assert "EXECUTE 'SELECT j.job_id FROM jobs j" in before[0]
    migrate.upgrade(empty_engine, "0009")
    with empty_engine.connect() as conn:
        function, trigger = append_function_and_chain_trigger(conn)
    assert trigger == before[1]
    assert "EXECUTE" not in function
    assert "(j.account, j.idempotency_key) >= (key_account, key_value)" in function
    migrate.downgrade(empty_engine, "0008")
    with empty_engine.connect() as conn:
        assert append_function_and_chain_trigger(conn) == before


PARTITION_GUARDS_OF = (
    "SELECT c.relname, i.relname, ix.indisunique FROM pg_inherits h"
    " JOIN pg_class c ON c.oid = h.inhrelid JOIN pg_class p ON p.oid = h.inhparent"
    " JOIN pg_index ix ON ix.indrelid = c.oid JOIN pg_class i ON i.oid = ix.indexrelid"
    " WHERE p.relname = :parent"
)


@pytest.mark.parametrize("empty_engine", POSTGRES_ONLY, indirect=True)
def test_each_partition_keeps_the_unique_rules_the_parent_cannot(empty_engine: Engine) -> None:
    """0018: a unique index on a partitioned table must hold the partition key, so the stream
    version, event id and one-terminal rules are each partition's unique indexes (and
    ledger_order's position); the parents keep the rest, and partitions are made ahead."""
    migrate.upgrade(empty_engine)
    with empty_engine.connect() as conn:
        for parent, rules in (
            ("events", {"stream_version", "event_id", "one_terminal"}),
            ("ledger_order", {"position"}),
        ):
            found: dict[str, set[str]] = {}
            rows = conn.execute(text(PARTITION_GUARDS_OF), {"parent": parent})
            for table, index, unique in rows:
                own = index.startswith(f"{table}_") and not index.endswith(("_pkey", "_idx"))
                if unique and own:  # (the parents' own indexes' copies end so)
                    found.setdefault(table, set()).add(index.removeprefix(f"{table}_"))
            assert found and all(kept == rules for kept in found.values()), found
        ahead = conn.execute(text("SELECT outcomes_partitions_ahead()")).scalar_one()
    assert ahead >= 2


@pytest.mark.parametrize("empty_engine", POSTGRES_ONLY, indirect=True)
def test_0018_moves_a_recorded_ledger_into_partitions(empty_engine: Engine) -> None:
    """A ledger recorded before 0018 keeps every event, position and link, and verifies."""
    migrate.upgrade(empty_engine, "0017")
    store = SqlStore(empty_engine, default_projections())
    for i in range(5):
        store.append(f"token-old-{i}", [_token_event(f"old-{i}")], 0)
    before = list(store.iter_events())
    migrate.upgrade(empty_engine)
    after = list(store.iter_events())
    assert after == before
    store.append("token-new", [_token_event("t-new")], 0)
    recorded = list(store.iter_events())
    assert len(recorded) == 6 and verify_chain(recorded).ok
    with empty_engine.connect() as conn:
        where = conn.execute(text("SELECT DISTINCT tableoid::regclass::text FROM events"))
        assert {row[0] for row in where} == {"events_p1"}
    migrate.downgrade(empty_engine, "0017")
    assert list(store.iter_events()) == recorded

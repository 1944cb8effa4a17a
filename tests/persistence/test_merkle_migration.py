"""Migration 0021 builds the Merkle tree of a ledger that already holds events (in ledger
order, from its positions), and the writers (the sequencer on Postgres, the store on SQLite)
go on from it; its downgrade gives back 0020's sequencer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, insert, text

from ledger.chain import event_rows, link_rows
from ledger.clock import now
from ledger.events import NewEvent, TokenCreated
from ledger.merkle import Frontier, event_leaf_hash
from ledger.merkle_store import inclusion_proof
from ledger.persistence import migrate
from ledger.persistence.engine import make_engine
from ledger.persistence.projections import default_projections
from ledger.persistence.schema import events
from ledger.persistence.sql_store import SqlStore
from tests.databases import create_database, drop_database, pg_url, require_postgres, unique_name

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
BEFORE = "0020"  # the revision before the tree's (renumbered with it at merge, if need be)


@pytest.fixture(params=BACKENDS)
def empty_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    if request.param == "sqlite":
        engine = make_engine(f"sqlite:///{tmp_path / 'empty.db'}")
        yield engine
        engine.dispose()
        return
    require_postgres()
    name = unique_name("outcomes_tree")
    create_database(name)
    engine = make_engine(pg_url(name))
    try:
        yield engine
    finally:
        engine.dispose()
        drop_database(name)


def _token_event(token_id: str) -> NewEvent:
    created = TokenCreated(
        token_id=token_id, account="acme", role="agent", token_hash=token_id * 8, tools=None
    )
    return NewEvent(payload=created, actor="operator:alice")


def test_the_migration_builds_the_tree_of_the_events_already_recorded(
    empty_engine: Engine,
) -> None:
    migrate.upgrade(empty_engine, BEFORE)
    rows = event_rows("token-old", [_token_event(f"t-{i}") for i in range(37)], 0, None, now())
    postgres = empty_engine.dialect.name == "postgresql"
    if not postgres:
        link_rows(None, rows)
    with empty_engine.begin() as conn:
        conn.execute(insert(events), rows)
    if postgres:
        with empty_engine.begin() as conn:
            conn.execute(text("SELECT outcomes_sequence(true)"))
    migrate.upgrade(empty_engine)
    store = SqlStore(empty_engine, default_projections())
    with store.in_order() as reads:
        assert reads.tree_state().tree_size == 37
    store.append("token-new", [_token_event("t-new")], 0)
    recorded = list(store.iter_events())
    leaves = [event_leaf_hash(e.hash) for e in recorded]
    with store.in_order() as reads:
        state = reads.tree_state()
        assert state.frontier == Frontier.empty().extend(leaves)
        assert state.start_position == recorded[0].position
        proof = inclusion_proof(reads.tree_hashes(), 37, 38)
        assert proof.verify(leaves[37], state.frontier.head())

    migrate.downgrade(empty_engine, BEFORE)
    with empty_engine.begin() as conn:
        assert "merkle_nodes" not in {
            r[0]
            for r in conn.execute(
                text(
                    "SELECT tablename FROM pg_tables"
                    if postgres
                    else "SELECT name FROM sqlite_master WHERE type = 'table'"
                )
            )
        }

"""bench.throughput --tree-ab's "without" arm (bench/throughput_notree.py) on a real Postgres
ledger: its reconcile process sequences every event and never extends the Merkle tree; the
real tick, for contrast, does; the tick it runs is the product's but for the tree step."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from typing import Any

import psycopg
import pytest

from bench._common import libpq_url
from bench.throughput_notree import (
    NOTREE_FUNCTION,
    SOURCE,
    TickChangedError,
    install,
    notree_function_sql,
    without_tree,
)
from ledger.events import job_stream
from ledger.persistence.appends import NO_STREAM
from ledger.persistence.sequencer_session import SequencerSession
from tests.concurrent_writers import accepted_event
from tests.factories import open_sql

REPO = SOURCE.parents[2]
pytestmark = pytest.mark.postgres


def _append_jobs(url: str, n: int) -> None:
    with open_sql(url) as store:
        for k in range(n):
            store.append(job_stream(uuid.uuid4()), [accepted_event(k)], NO_STREAM)


def _counts(conn: psycopg.Connection[Any]) -> tuple[int, int, int, int]:
    """(events, order rows, the tree's size, stored subtrees)."""
    row = conn.execute(
        "SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM ledger_order),"
        " (SELECT tree_size FROM outcomes_tree_at()), (SELECT count(*) FROM merkle_nodes)"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2]), int(row[3])


def test_the_entry_sequences_the_ledger_and_leaves_the_tree_unextended(
    pg_database: str,
) -> None:
    _append_jobs(pg_database, 20)
    env = {**os.environ, "OUTCOMES_DATABASE_URL": pg_database}
    # The reconcile loop, whose sequencer ticks: stopped (by its pid) once the ledger is placed.
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.throughput_notree", "reconcile"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with psycopg.connect(libpq_url(pg_database), autocommit=True) as conn:
            deadline = time.monotonic() + 60
            while _counts(conn)[1] < 20 and time.monotonic() < deadline:
                assert proc.poll() is None, proc.communicate()[1]
                time.sleep(0.1)
            assert _counts(conn) == (20, 20, 0, 0)
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    with psycopg.connect(libpq_url(pg_database), autocommit=True) as conn:
        assert _counts(conn) == (20, 20, 0, 0)
        # The loop's own session, patched as the entry patches it: sequenced, no tree.
        _append_jobs(pg_database, 20)
        with without_tree():
            session = SequencerSession(libpq_url(pg_database))
            try:
                assert session.tick() == 20
            finally:
                session.close()
        assert _counts(conn) == (40, 40, 0, 0)


def test_the_tick_it_installs_is_the_product_tick_without_the_tree_step() -> None:
    sql = notree_function_sql(SOURCE.read_text())
    assert f"FUNCTION {NOTREE_FUNCTION}(p_wait boolean)" in sql
    assert "outcomes_tree" not in sql and "INSERT INTO ledger_order" in sql
    with pytest.raises(TickChangedError):
        notree_function_sql("CREATE OR REPLACE FUNCTION outcomes_sequence(p_wait boolean)")


def test_with_the_tree_for_contrast(pg_database: str) -> None:
    install(pg_database)  # installed beside the real tick, which still extends the tree
    _append_jobs(pg_database, 20)
    with psycopg.connect(libpq_url(pg_database), autocommit=True) as conn:
        conn.execute("SELECT outcomes_sequence(true)")
        assert _counts(conn) == (20, 20, 20, 1)  # 16 leaves: one stored subtree of level 4

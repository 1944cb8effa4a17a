"""bench.agents_rows: rows written a call, from Postgres's statistics, by table (partitions under
their parent), counted once every other connection has closed and reported."""

from __future__ import annotations

import uuid

import psycopg

from bench._common import scratch_database
from bench.agents_rows import GOAL_ROWS, RowsMeter, rows_json, rows_lines

SCHEMA = """
CREATE TABLE work (id int PRIMARY KEY, status text);
CREATE TABLE log (position int, note text) PARTITION BY RANGE (position);
CREATE TABLE log_a PARTITION OF log FOR VALUES FROM (0) TO (100);
CREATE TABLE log_b PARTITION OF log FOR VALUES FROM (100) TO (200);
"""


def test_rows_a_call_are_read_by_table_after_the_writers_closed(pg_database: str) -> None:
    with scratch_database(f"outcomes_rows_{uuid.uuid4().hex[:6]}") as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(SCHEMA)
        meter = RowsMeter(dsn).start()  # the schema's rows are not the calls'
        writer = psycopg.connect(dsn, autocommit=True)
        try:
            for call in range(4):  # each call: an insert, an update, two log rows
                writer.execute("INSERT INTO work VALUES (%s, 'queued')", (call,))
                writer.execute("UPDATE work SET status = 'done' WHERE id = %s", (call,))
                writer.execute("INSERT INTO log VALUES (%s, 'a'), (%s, 'b')", (call, 100 + call))
            writer.execute("DELETE FROM work WHERE id = 0")  # a delete is a row written too
        finally:
            writer.close()  # its statistics are reported at exit
        meter.calls = 4
        meter.finish()
    assert meter.by_table == {"work": 9 / 4, "log": 2.0}
    assert meter.per_call == 4.25
    assert rows_json({"ours": meter})["ours"] == {
        "calls": 4,
        "per_call": 4.25,
        "by_table": {"work": 2.25, "log": 2.0},
    }
    lines = rows_lines({"ours": meter})
    assert lines[0] == "rows written a call, ours: 4.2 over 4 calls (work 2.25, log 2.00)"
    assert lines[-1] == f"rows written a call: 4.2 (goal <= {GOAL_ROWS}) -> met"


def test_a_side_that_served_no_call_has_no_figure() -> None:
    meter = RowsMeter("postgresql://unused")
    meter.finish()  # reads nothing: no call to divide by
    assert meter.per_call is None and rows_lines({"ours": meter}) == []

"""Rows written a call (bench.agents): what a side's database wrote over the whole run, in
rows inserted, updated and deleted by table (Postgres's own statistics, a partitioned table's
partitions summed under its name, trigger-written rows included), divided by the calls the
side served, warm-up calls included.

Counted over the run, not a round: a live backend reports its statistics lazily (at most once
a second, or some seconds after it went idle), so the run's figure is read once every other
connection to the database has closed, each having reported its statistics at exit. What the
processes wrote while idle (heartbeats, the sequencer) is in it too: a call costs that share.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import psycopg

from bench._common import libpq_url

GOAL_ROWS = 8  # issue 48: rows written a call, at most

# Rows written so far, by table (a partition counted under its parent).
WRITTEN = """
SELECT coalesce(parent.relname, t.relname), sum(t.n_tup_ins + t.n_tup_upd + t.n_tup_del)
FROM pg_stat_user_tables t
LEFT JOIN pg_inherits i ON i.inhrelid = t.relid
LEFT JOIN pg_class parent ON parent.oid = i.inhparent
GROUP BY 1
"""
OTHERS = """SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()"""
CLOSE_WAIT_S = 10.0  # for the side's processes' connections to end (each reports at exit)


def written(dsn: str, *, once_closed: bool = False) -> Counter[str]:
    """Rows written so far in this database, by table; with `once_closed`, read once no other
    connection is open (or after CLOSE_WAIT_S: a figure a little short rather than none)."""
    with psycopg.connect(libpq_url(dsn), autocommit=True) as conn:
        deadline = time.monotonic() + CLOSE_WAIT_S
        while once_closed and time.monotonic() < deadline:
            row = conn.execute(OTHERS).fetchone()
            if row is None or row[0] == 0:
                break
            time.sleep(0.1)
        return Counter({str(name): int(n) for name, n in conn.execute(WRITTEN)})


@dataclass
class RowsMeter:
    """One side's rows: a snapshot at its start, the calls it served, the run's difference."""

    dsn: str
    before: Counter[str] = field(default_factory=Counter)
    calls: int = 0
    by_table: dict[str, float] | None = None  # rows a call, once read

    def start(self) -> RowsMeter:
        self.before = written(self.dsn)
        return self

    def finish(self) -> None:
        """Read once the side's processes stopped: rows a call by table, largest first."""
        if self.calls == 0:
            return
        after = written(self.dsn, once_closed=True)
        after.subtract(self.before)
        self.by_table = {name: n / self.calls for name, n in after.most_common() if n > 0}

    @property
    def per_call(self) -> float | None:
        return sum(self.by_table.values()) if self.by_table is not None else None


def rows_json(meters: dict[str, RowsMeter]) -> dict[str, Any]:
    return {
        name: {"calls": m.calls, "per_call": m.per_call, "by_table": m.by_table}
        for name, m in meters.items()
    }


def rows_lines(meters: dict[str, RowsMeter]) -> list[str]:
    """The table's lines: each side's rows a call, then by table, and the goal's verdict."""
    lines = []
    for name, meter in meters.items():
        if meter.per_call is None or meter.by_table is None:
            continue
        parts = ", ".join(f"{t} {n:.2f}" for t, n in meter.by_table.items())
        lines.append(
            f"rows written a call, {name}: {meter.per_call:.1f} over {meter.calls} calls ({parts})"
        )
    ours = meters.get("ours")
    if ours is not None and ours.per_call is not None:
        verdict = "met" if ours.per_call <= GOAL_ROWS else "NOT met"
        lines.append(f"rows written a call: {ours.per_call:.1f} (goal <= {GOAL_ROWS}) -> {verdict}")
    return lines

"""Postgres: the sequencer's own connection. Whoever holds the leader lock on it (a session-level
advisory lock, released when the connection or its process ends) is the one sequencer: it ticks
(`outcomes_sequence`) and waits for job notifications between ticks. The others try to take the
lock again now and then, so when the leader dies another one leads within a second."""

from __future__ import annotations

from typing import Any

import psycopg

from ledger.persistence.errors import translated
from ledger.persistence.projections import JOBS_CHANNEL

# pg_try_advisory_lock key of the sequencer's leader ("outc" "lead").
LEADER_LOCK_KEY = 0x6F757463_6C656164
_LEAD = "SELECT pg_try_advisory_lock(%s)"
# One tick of the sequencer (psycopg): waiting for one under way (a reader that must see what
# committed before it asked), or not (the sequencer's loop: -1 when another process is ticking).
SEQUENCE = "SELECT outcomes_sequence(%s)"


def scalar(conn: psycopg.Connection[Any], sql: str, params: tuple[Any, ...]) -> Any:
    """One statement's one value, on a psycopg connection (errors translated)."""
    with translated():
        row = conn.execute(sql, params).fetchone()
    assert row is not None
    return row[0]


class SequencerSession:
    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        self._leading = False

    @property
    def leading(self) -> bool:
        return self._leading

    def lead(self) -> bool:
        """Whether this session leads, taking the lead if nobody holds it."""
        if self._leading:
            return True
        conn = self._connection()
        with translated():
            row = conn.execute(_LEAD, (LEADER_LOCK_KEY,)).fetchone()
            if row is not None and row[0]:
                conn.execute(f"LISTEN {JOBS_CHANNEL}")  # woken by each job write
                self._leading = True
        return self._leading

    def tick(self) -> int:
        """One tick: how many events got their ledger position (-1: another tick was under
        way, a reader's catching up)."""
        return int(scalar(self._connection(), SEQUENCE, (False,)))

    def wait(self, timeout_s: float) -> None:
        """Until a job is written (a notification) or `timeout_s` passes; what else was
        notified meanwhile is taken too, so one tick answers them all."""
        conn = self._connection()
        with translated():
            for _ in conn.notifies(timeout=timeout_s, stop_after=1):
                pass
            for _ in conn.notifies(timeout=0):
                pass

    def reset(self) -> None:
        """Drop the connection (after an error): the lead goes with it."""
        self.close()

    def close(self) -> None:
        conn, self._conn, self._leading = self._conn, None, False
        if conn is not None:
            conn.close()

    def _connection(self) -> psycopg.Connection[tuple[object, ...]]:
        if self._conn is None or self._conn.closed:
            self._leading = False
            with translated():
                self._conn = psycopg.connect(self._dsn, autocommit=True)
        return self._conn

"""The SQL store's side of ledger order (Postgres; SQLite sequences at write): a sequencer
tick, where the sequencer stands, what is wrong with the order rows, and the bid to lead the
sequencing. Mixed into `SqlStore`."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import psycopg
from sqlalchemy import Connection, Engine, text

from ledger.clock import utc
from ledger.persistence.base import SequencerLeader
from ledger.persistence.errors import translated
from ledger.persistence.sequencer_session import SEQUENCE, SequencerSession, scalar
from ledger.queries import OrderProblems, SequencerState

# What the next tick would take, as the tick itself asks it (`outcomes_unsequenced`).
_SEQUENCER_STATE = text(
    "SELECT a.head, a.tick, a.ticked_at, count(u.event_position) AS waiting,"
    " extract(epoch FROM clock_timestamp() - min(u.recorded_at)) AS lag_s,"
    " (SELECT s.dense_from FROM ledger_sequencer s WHERE s.id = 1) AS dense_from,"
    " outcomes_partitions_ahead() AS ahead"
    " FROM outcomes_sequencer_at() a"
    " LEFT JOIN outcomes_unsequenced(a.snapshot, pg_current_snapshot(), a.unsequenced_above) u"
    " ON true"
    " GROUP BY a.head, a.tick, a.ticked_at"
)
# A committed event the sequencer's last snapshot already saw, yet with no order row.
_UNSEQUENCED = text(
    "SELECT e.position FROM events e, outcomes_sequencer_at() a"
    " WHERE (e.txid IS NULL OR pg_visible_in_snapshot(e.txid, a.snapshot))"
    " AND NOT EXISTS (SELECT 1 FROM ledger_order o WHERE o.event_position = e.position)"
    " ORDER BY e.position"
)
_ORPHANED = text(
    "SELECT o.position FROM ledger_order o"
    " WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.position = o.event_position)"
    " ORDER BY o.position"
)
_DUPLICATED = text(
    "SELECT o.event_position FROM ledger_order o"
    " GROUP BY o.event_position HAVING count(*) > 1 ORDER BY o.event_position"
)


class SqlSequencing:
    engine: Engine
    dialect: str
    connection: Callable[[], AbstractContextManager[Connection]]
    _autocommit: Callable[[Callable[[psycopg.Connection[Any]], Any]], Any]

    def sequence(self, *, wait: bool = True) -> int:
        if self.dialect != "postgresql":
            return 0
        return int(self._autocommit(lambda conn: scalar(conn, SEQUENCE, (wait,))))

    def sequencer_state(self) -> SequencerState | None:
        if self.dialect != "postgresql":
            return None
        with self.connection() as conn, translated():
            row = conn.execute(_SEQUENCER_STATE).one()
        return SequencerState(
            head=int(row.head),
            dense_from=int(row.dense_from),
            ticks=int(row.tick),
            ticked_at=utc(row.ticked_at),
            waiting=int(row.waiting),
            lag_s=float(row.lag_s or 0.0),
            partitions_ahead=int(row.ahead),
        )

    def order_problems(self) -> OrderProblems | None:
        if self.dialect != "postgresql":
            return None
        with self.connection() as conn, translated():
            return OrderProblems(
                unsequenced=[int(p) for p in conn.execute(_UNSEQUENCED).scalars()],
                orphaned=[int(p) for p in conn.execute(_ORPHANED).scalars()],
                duplicated=[int(p) for p in conn.execute(_DUPLICATED).scalars()],
            )

    def sequencer_leader(self) -> SequencerLeader | None:
        if self.dialect != "postgresql":
            return None
        dsn = self.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        return SequencerSession(dsn)

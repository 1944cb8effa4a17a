"""The small tables that are written and emptied all day, kept small (Postgres).

`job_count_deltas` and `finding_count_deltas` (every write inserts, every fold deletes) and
`leases` (a row from claim to outcome) hold few live rows, but each row they lose stays as a
dead row until a VACUUM. Readers scan the deltas whole (every count sums them), so their cost
follows the table's size on disk, not its live rows: without a vacuum, a million jobs left
377 MB of dead deltas and every count took 0.3 to 2 s. Autovacuum normally does this; it may be
off, or busy with the large tables for minutes. So the process that folds the counts also
vacuums these tables when their dead rows pass a threshold (the table's owner only: another
role's VACUUM skips the table with a notice, and autovacuum remains its keeper).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import SQLAlchemyError

CHURN_TABLES = ("job_count_deltas", "finding_count_deltas", "leases")
DEAD_ROWS = 20_000  # dead rows that make a table worth a vacuum (a few MB of pages)
CHECK_EVERY_S = 10.0  # how often a process asks (the folds run every second)

_DEAD = text(
    "SELECT relname FROM pg_stat_user_tables WHERE relname = ANY(:names)"
    " AND n_dead_tup >= :dead AND pg_has_role(current_user,"
    " (SELECT relowner FROM pg_class WHERE oid = relid), 'USAGE')"
)
log = logging.getLogger(__name__)
_checked_at: weakref.WeakKeyDictionary[Engine, float] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def due(engine: Engine, now: float | None = None) -> bool:
    """Whether this process should look at the tables now (at most every CHECK_EVERY_S)."""
    now = time.monotonic() if now is None else now
    with _lock:
        if now - _checked_at.get(engine, float("-inf")) < CHECK_EVERY_S:
            return False
        _checked_at[engine] = now
    return True


def vacuum_churn(conn: Connection, dead: int = DEAD_ROWS) -> list[str]:
    """VACUUM the churn tables this role owns whose dead rows reached `dead`; their names.
    `conn` must be in autocommit (VACUUM runs outside a transaction)."""
    if conn.dialect.name != "postgresql":
        return []
    found = conn.execute(_DEAD, {"names": list(CHURN_TABLES), "dead": dead}).scalars()
    names = [str(n) for n in found if n in CHURN_TABLES]
    if not names:
        return []
    try:
        # SKIP_LOCKED: a table another VACUUM (or a rebuild) holds is left for the next check.
        conn.execute(text(f"VACUUM (SKIP_LOCKED) {', '.join(names)}"))
    except SQLAlchemyError as exc:  # the fold it follows is done: this waits for the next
        log.warning("the churn tables were not vacuumed now: %s", exc)
        return []
    return names

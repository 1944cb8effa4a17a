"""Store reads and writes that only the tests use, over the stores' public API (and, on SQL,
the ledger's own page query), so the store contract carries none of them."""

from __future__ import annotations

from datetime import datetime
from itertools import islice

from alembic.config import Config
from alembic.script import ScriptDirectory

from ledger.events import RecordedEvent
from ledger.persistence.base import Store, Writes
from ledger.persistence.errors import translated
from ledger.persistence.migrate import SCRIPT_LOCATION
from ledger.persistence.sql_rows import PAGE, row_to_event
from ledger.persistence.sql_store import SqlStore


def read_after(store: Store, position: int, limit: int = 1000) -> list[RecordedEvent]:
    """Events after `position`, in ledger order (the events committed before the call are
    sequenced first); never skips one that commits later."""
    if isinstance(store, SqlStore):
        store.sequence()
        with store.connection() as conn, translated():
            rows = conn.execute(PAGE, {"after": position, "limit": limit}).all()
        return [row_to_event(row) for row in rows]
    return list(islice((e for e in store.iter_events() if e.position > position), limit))


def renew_lease(tx: Writes, job_id: str, attempt: int, expires_at: datetime) -> bool:
    """Push one lease forward; False when the lease is no longer this attempt's."""
    return tx.renew_leases([(job_id, attempt)], expires_at)[0]


def head_revision() -> str | None:
    """The newest migration's revision, as the scripts in `migrations/` name it."""
    config = Config(str(SCRIPT_LOCATION / "alembic.ini"))
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    return ScriptDirectory.from_config(config).get_current_head()


def settled_head(store: Store) -> int:
    """The last ledger position once everything committed so far is sequenced. A head read
    without the tick can move later for events committed before it (the backlog gauge and the
    reconciler tick in the background), so "nothing recorded between two reads" compares
    settled heads."""
    store.sequence()
    return store.last_position()

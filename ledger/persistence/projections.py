"""The read models (jobs, brakes, tokens) as projections of the events.

Each row keeps the whole folded view as JSON next to copies of the columns its indexes need.
Live updates and `outcomes rebuild` (`ledger.services.rebuild`) run the same pure fold
(`ledger.read_models`), so a rebuild reproduces the live tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from pydantic import BaseModel
from sqlalchemy import Connection, Table, bindparam, insert, select, text, update

from ledger.events import JOB_EVENT_TYPES, TERMINAL_EVENT_TYPES, RecordedEvent, job_id_of
from ledger.persistence.schema import READ_MODEL_TABLES, events
from ledger.persistence.sql_rows import EVENT_COLUMNS, row_to_event
from ledger.read_models import READ_MODELS, ReadModel

V = TypeVar("V", bound=BaseModel)
JOBS_CHANNEL = "outcomes_jobs"  # NOTIFY: a wake-up hint for long-polls, never the log itself
# In a NOTIFY's comma-separated job ids, one that ends with this changed to its outcome.
ENDED_MARK = "!"
_IDS_PER_NOTIFY = 150
TABLES: dict[str, Table] = {t.name: t for t in READ_MODEL_TABLES}
_NOTIFY = text("SELECT pg_notify(:channel, :payload)")
_EARLIER = (
    select(*EVENT_COLUMNS)
    .where(
        events.c.stream_id == bindparam("stream_id"),
        events.c.stream_version < bindparam("version"),
    )
    .order_by(events.c.stream_version)
)


class Projection:
    """A read model kept in step with the events, inside the appending transaction."""

    def handles(self, event_type: str) -> bool:
        raise NotImplementedError

    def apply(self, conn: Connection, recorded: Sequence[RecordedEvent]) -> Any:
        """Bring the model up to date with `recorded` (one stream's new events); returns the
        stream's view, if the model keeps one."""
        raise NotImplementedError


class JobNotifier(Projection):
    def handles(self, event_type: str) -> bool:
        return event_type in JOB_EVENT_TYPES

    def apply(self, conn: Connection, recorded: Sequence[RecordedEvent]) -> None:
        if conn.dialect.name != "postgresql":
            return None
        ended = {job_id_of(e.stream_id) for e in recorded if e.type in TERMINAL_EVENT_TYPES}
        job_ids = sorted(
            job_id + ENDED_MARK if job_id in ended else job_id
            for job_id in {job_id_of(e.stream_id) for e in recorded}
        )
        # A NOTIFY payload is capped at 8000 bytes: 150 ids (38 bytes each) stay well below.
        for start in range(0, len(job_ids), _IDS_PER_NOTIFY):
            payload = ",".join(job_ids[start : start + _IDS_PER_NOTIFY])
            conn.execute(_NOTIFY, {"channel": JOBS_CHANNEL, "payload": payload})


class ViewProjection(Projection, Generic[V]):
    """Folds events of some types into one row per key of `table` (as `model` defines)."""

    def __init__(self, table: Table, model: ReadModel[V]) -> None:
        self.table = table
        self.model = model
        self.refold = model.refold
        self.view_type = model.view_type
        self.key = model.key
        self.fold = model.fold
        self._pk = next(iter(table.primary_key.columns))
        # Built once (statement construction is a real cost on the append path).
        self._load = select(self._pk, table.c.view).where(
            self._pk.in_(bindparam("keys", expanding=True))
        )
        self._update = update(table).where(self._pk == bindparam("_key"))
        self._insert = insert(table)

    def handles(self, event_type: str) -> bool:
        return self.model.handles(event_type)

    def load(self, conn: Connection, keys: set[str]) -> dict[str, V]:
        rows = conn.execute(self._load, {"keys": sorted(keys)})
        return {row[0]: self.view_type.model_validate(row[1]) for row in rows}

    def row(self, key: str, view: V) -> dict[str, Any]:
        return self.model.row(key, view)

    def apply(self, conn: Connection, recorded: Sequence[RecordedEvent]) -> V | None:
        """Fold the events into their rows; returns the last event's view."""
        keys = {self.key(e) for e in recorded}
        # A key whose first event here starts its stream has no row yet: skip the lookup.
        fresh = {self.key(e) for e in recorded if e.stream_version == 1}
        views: dict[str, V] = self.load(conn, keys - fresh) if keys - fresh else {}
        existed = set(views)
        if self.refold:
            views = self._from_events(conn, recorded, fresh)
        for event in recorded:
            k = self.key(event)
            views[k] = self.fold(views.get(k), event)
        for k, view in views.items():
            values = self.row(k, view)
            if k in existed:
                conn.execute(self._update, values | {"_key": k})
            else:
                conn.execute(self._insert, values)
        return views[self.key(recorded[-1])]

    def _from_events(
        self, conn: Connection, recorded: Sequence[RecordedEvent], fresh: set[str]
    ) -> dict[str, V]:
        """The views before `recorded`, folded from their streams' earlier events: a row
        edited or deleted behind the ledger's back is replaced by the truth, not built on."""
        firsts: dict[str, RecordedEvent] = {}
        for event in recorded:
            firsts.setdefault(self.key(event), event)
        views: dict[str, V] = {}
        for k, first in firsts.items():
            if k in fresh:
                continue
            earlier = conn.execute(
                _EARLIER, {"stream_id": first.stream_id, "version": first.stream_version}
            )
            for row in earlier:
                views[k] = self.fold(views.get(k), row_to_event(row))
        return views


def default_projections() -> list[Projection]:
    return [JobNotifier(), *(ViewProjection(TABLES[m.table], m) for m in READ_MODELS)]

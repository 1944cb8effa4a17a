"""Postgres NOTIFY on job changes: a wake-up hint for long-polls, never the log itself.

Sent inside the appending transaction, so it is delivered only if the events commit.
Postgres coalesces identical notifications of one transaction. SQLite readers poll.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, text

from ledger.events import JOB_EVENT_TYPES, RecordedEvent, job_id_of
from ledger.persistence.store import Projection

JOBS_CHANNEL = "outcomes_jobs"
_IDS_PER_NOTIFY = 150
_NOTIFY = text("SELECT pg_notify(:channel, :payload)")


class JobNotifier(Projection):
    def handles(self, event_type: str) -> bool:
        return event_type in JOB_EVENT_TYPES

    def apply(self, conn: Connection, recorded: Sequence[RecordedEvent]) -> None:
        if conn.dialect.name != "postgresql":
            return
        job_ids = sorted({job_id_of(e.stream_id) for e in recorded})
        # A NOTIFY payload is capped at 8000 bytes: 150 ids (37 bytes each) stay well below.
        for start in range(0, len(job_ids), _IDS_PER_NOTIFY):
            payload = ",".join(job_ids[start : start + _IDS_PER_NOTIFY])
            conn.execute(_NOTIFY, {"channel": JOBS_CHANNEL, "payload": payload})

    # Not a table: nothing to clear or rebuild.
    def clear(self, conn: Connection) -> None:
        return None

    def fold_into(self, views: dict[str, Any], event: RecordedEvent) -> None:
        return None

    def write_all(self, conn: Connection, views: dict[str, Any]) -> None:
        return None

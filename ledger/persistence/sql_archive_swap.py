"""Recording and finishing an archive in the SQL store, once its files are written and read
back (`ledger.services.archive` calls these in that order, and never before).

- `record_archive`: one transaction: the archive's row (RECORDED) and its jobs' ids and
  accounts (`archived_jobs`), listed from the jobs whose last event was written in its range.
- `finish_archive`: one transaction. The ledger must still be what the archive holds (its
  range's events and order rows counted again, its end still a clean cut, no event written
  since for one of its jobs); then the job streams' events of the range leave, the other
  streams' stay, the jobs' read-model rows go (and their leases and dispatches, if any), and
  the archive is DONE. On Postgres the range's partitions are detached and dropped, and the
  kept streams' rows below the archive's end are moved into one partition, `events_kept`
  (`ledger_order_kept`), which replaces the one an earlier archive left; each partition of
  `jobs` (0020: a window of creation time) whose rows are all the archive's jobs is detached
  and dropped too, its kept counts taken off first, and only the archived rows of partitions
  that still hold live jobs are deleted. Writers and readers wait for this transaction (a lock
  on the parents), which costs a copy of the kept rows, a count of the archived jobs by
  partition and a delete of the few rows left. On SQLite the job streams' rows and the jobs'
  rows are deleted, the append-only trigger dropped and made again around it, inside the same
  transaction: no one else ever sees the ledger without it.
A crash anywhere leaves the transaction undone: the rows, the files, or both, never neither.
"""

from __future__ import annotations

import re

from sqlalchemy import Connection, Engine, text

from ledger.archive import DONE, RECORDED, ArchiveRecord
from ledger.errors import ArchiveRefusedError
from ledger.persistence.errors import translated
from ledger.persistence.schema import archives

_COLUMNS = (
    "position, stream_id, stream_version, event_id, type, data, code, actor, recorded_at, "
    "prev_hash, hash, ledger_hash, txid"
)
_LIST_JOBS = text(
    "INSERT INTO archived_jobs (job_id, account, archive_id)"
    " SELECT j.job_id, j.account, :id FROM jobs j"
    " WHERE j.ledger_position >= :lo AND j.ledger_position < :hi AND j.terminal"
)
# A job of the archive that moved since it was planned (a late outcome): the read model says.
_MOVED = text(
    "SELECT a.job_id FROM archived_jobs a LEFT JOIN jobs j ON j.job_id = a.job_id"
    " WHERE a.archive_id = :id AND (j.job_id IS NULL OR NOT j.terminal OR j.ledger_position >= :hi)"
    " LIMIT 1"
)
# … and, under the lock, from the events written since that check.
_WRITTEN_SINCE = text(
    "SELECT substr(e.stream_id, 5) FROM events e WHERE e.position > :since"
    " AND e.stream_id LIKE 'job-%' AND EXISTS (SELECT 1 FROM archived_jobs a"
    "  WHERE a.job_id = substr(e.stream_id, 5) AND a.archive_id = :id) LIMIT 1"
)
_COUNT_EVENTS = text("SELECT count(*) FROM events e WHERE e.position >= :lo AND e.position < :hi")
_COUNT_ORDER = text(
    "SELECT count(*), max(o.position) FROM ledger_order o"
    " WHERE o.event_position >= :lo AND o.event_position < :hi"
)
_CROSSING = text(
    "SELECT 1 FROM ledger_order o WHERE o.event_position >= :hi AND o.position < :last LIMIT 1"
)
_WRITTEN = text("SELECT outcomes_written_position()")
_DROP_JOBS = text(
    "DELETE FROM jobs WHERE job_id IN"
    " (SELECT a.job_id FROM archived_jobs a WHERE a.archive_id = :id)"
)
# The archived jobs' operational rows (few: a lease ends with its attempt, a dispatch with
# its wait), by the same list.
_DROP_JOB_ROWS = [
    text(
        f"DELETE FROM {table} WHERE job_id IN"
        " (SELECT a.job_id FROM archived_jobs a WHERE a.archive_id = :id)"
    )
    for table in ("leases", "dispatches")
]
# Postgres (0020): how many of the archive's jobs each partition of `jobs` holds; a window
# partition whose rows are all of them is dropped whole (its kept counts taken off first:
# a dropped row fires no trigger), the others' rows are deleted.
_ARCHIVED_BY_PARTITION = text(
    "SELECT j.tableoid::regclass::text AS part, count(*) AS n"
    " FROM archived_jobs a JOIN jobs j ON j.job_id = a.job_id"
    " WHERE a.archive_id = :id GROUP BY 1 ORDER BY 1"
)
_UNCOUNT = (
    "INSERT INTO job_count_deltas (hour, account, tool, accepted, status, code, jobs)"
    " SELECT floor(extract(epoch FROM created_at) / 3600)::bigint, account, tool, accepted,"
    " status, coalesce(code, ''), -count(*) FROM {part} GROUP BY 1, 2, 3, 4, 5, 6"
)
_JOBS_PARTITION = re.compile(r"^jobs_(?:t(\d+)|legacy_low|legacy_high)$")
# An event of a job stream this archive takes (`e`: the event; `:id`: the archive). Every other
# stream's events below the cut are kept: those that are not jobs', and the jobs' that have not
# ended below it (straddlers), until an archive whose cut passes all their events takes them.
_ARCHIVED_STREAM = (
    "(e.stream_id LIKE 'job-%' AND EXISTS (SELECT 1 FROM archived_jobs a"
    " WHERE a.job_id = substr(e.stream_id, 5) AND a.archive_id = :id))"
)
_DONE = text("UPDATE archives SET state = :done WHERE archive_id = :id")
_PARTITIONS = text(
    "SELECT p.lower FROM ledger_partitions p WHERE p.lower >= :lo AND p.upper <= :hi"
    " ORDER BY p.lower"
)
_KEPT_EXISTS = text("SELECT to_regclass('events_kept') IS NOT NULL")
_SQLITE_TRIGGER = text("SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = :name")


class SqlArchiveSwap:
    engine: Engine
    dialect: str

    def record_archive(self, record: ArchiveRecord) -> int:
        values = {
            "archive_id": record.archive_id,
            "state": RECORDED,
            "created_at": record.created_at,
            "write_from": record.write_from,
            "write_to": record.write_to,
            "ledger_first": record.ledger_first,
            "ledger_last": record.ledger_last,
            "ledger_hash": record.ledger_hash,
            "events": record.events,
            "jobs": record.jobs,
            "manifest_sha256": record.manifest_sha256,
            "manifest": record.manifest.decode(),
        }
        range_ = {"id": record.archive_id, "lo": record.write_from, "hi": record.write_to}
        with translated(), self.engine.begin() as conn:
            conn.execute(archives.insert().values(**values))
            return int(conn.execute(_LIST_JOBS, range_).rowcount)

    def abandon_archive(self, archive_id: int) -> None:
        with translated(), self.engine.begin() as conn:
            conn.execute(
                text("DELETE FROM archived_jobs WHERE archive_id = :id"), {"id": archive_id}
            )
            conn.execute(
                text("DELETE FROM archives WHERE archive_id = :id AND state = :recorded"),
                {"id": archive_id, "recorded": RECORDED},
            )

    def finish_archive(self, record: ArchiveRecord) -> None:
        params = {"id": record.archive_id, "lo": record.write_from, "hi": record.write_to}
        postgres = self.dialect == "postgresql"
        since = 0
        by_partition: list[tuple[str, int]] = []
        if postgres:  # before the lock: the long checks, with nothing waiting behind them
            with translated(), self.engine.begin() as conn:
                since = int(conn.execute(_WRITTEN).scalar_one())
                _refuse_if_moved(conn, params)
                found = conn.execute(_ARCHIVED_BY_PARTITION, {"id": record.archive_id})
                by_partition = [(str(part), int(n)) for part, n in found]
        with translated(), self.engine.begin() as conn:
            if postgres:
                conn.execute(text("SET LOCAL lock_timeout = '60s'"))
                conn.execute(text("LOCK TABLE events, ledger_order, jobs IN ACCESS EXCLUSIVE MODE"))
                moved = conn.execute(_WRITTEN_SINCE, {"since": since, "id": record.archive_id})
                _refuse(moved.scalar(), "an event was written for it since the check")
            else:
                _refuse_if_moved(conn, params)
            _check_unchanged(conn, record, postgres)
            if postgres:
                _swap_partitions(conn, record)
                _drop_jobs_partitions(conn, by_partition)
            else:
                _delete_job_rows(conn, record)
            conn.execute(_DROP_JOBS, {"id": record.archive_id})
            for statement in _DROP_JOB_ROWS:
                conn.execute(statement, {"id": record.archive_id})
            conn.execute(_DONE, {"id": record.archive_id, "done": DONE})


def _refuse_if_moved(conn: Connection, params: dict[str, int]) -> None:
    _refuse(conn.execute(_MOVED, params).scalar(), "it changed since it was planned")


def _refuse(job_id: object, why: str) -> None:
    if job_id is not None:
        raise ArchiveRefusedError(
            f"job {job_id} of the archive has not ended in its range ({why}): nothing was "
            "removed; run the archive again"
        )


def _check_unchanged(conn: Connection, record: ArchiveRecord, postgres: bool) -> None:
    range_ = {"lo": record.write_from, "hi": record.write_to}
    count = int(conn.execute(_COUNT_EVENTS, range_).scalar_one())
    changed = count != record.events
    if postgres:
        ordered, last = conn.execute(_COUNT_ORDER, range_).one()
        changed = changed or ordered != count or last != record.ledger_last
        if not changed and last is not None:
            crossing = conn.execute(_CROSSING, range_ | {"last": last}).first()
            changed = crossing is not None
    if changed:
        raise ArchiveRefusedError(
            f"the ledger's rows in write positions [{record.write_from}, {record.write_to}) are "
            f"not what archive {record.archive_id} holds any more: nothing was removed"
        )


def _swap_partitions(conn: Connection, record: ArchiveRecord) -> None:
    hi = record.write_to
    lowers = [
        int(lo) for lo in conn.execute(_PARTITIONS, {"lo": record.write_from, "hi": hi}).scalars()
    ]
    had_kept = bool(conn.execute(_KEPT_EXISTS).scalar_one())
    # The kept streams' rows below the new end: those an earlier archive kept, and this range's,
    # but for the streams of the jobs this archive takes (a straddler an earlier one kept too).
    conn.execute(text("CREATE TABLE events_kept_new (LIKE events INCLUDING CONSTRAINTS)"))
    conn.execute(
        text(
            f"INSERT INTO events_kept_new ({_COLUMNS}) SELECT {_COLUMNS} FROM events e"
            f" WHERE e.position < :hi AND NOT {_ARCHIVED_STREAM} ORDER BY e.position"
        ),
        {"hi": hi, "id": record.archive_id},
    )
    conn.execute(
        text("CREATE TABLE ledger_order_kept_new (LIKE ledger_order INCLUDING CONSTRAINTS)")
    )
    conn.execute(
        text(
            "INSERT INTO ledger_order_kept_new"
            " (position, event_position, ledger_hash, sequenced_at)"
            " SELECT o.position, o.event_position, o.ledger_hash, o.sequenced_at"
            " FROM ledger_order o JOIN events_kept_new k ON k.position = o.event_position"
            " ORDER BY o.position"
        )
    )
    gone = [f"p{lo}" for lo in lowers] + (["kept"] if had_kept else [])
    for suffix in gone:
        for parent in ("events", "ledger_order"):
            conn.execute(text(f"ALTER TABLE {parent} DETACH PARTITION {parent}_{suffix}"))
            conn.execute(text(f"DROP TABLE {parent}_{suffix}"))
    for parent in ("events", "ledger_order"):
        conn.execute(text(f"ALTER TABLE {parent}_kept_new RENAME TO {parent}_kept"))
        conn.execute(text("SELECT outcomes_partition_guards(:t)"), {"t": f"{parent}_kept"})
        conn.execute(
            text(
                f"ALTER TABLE {parent} ATTACH PARTITION {parent}_kept FOR VALUES FROM (1) TO ({hi})"
            )
        )
    conn.execute(
        text("DELETE FROM ledger_partitions WHERE lower >= :lo AND upper <= :hi"),
        {"lo": record.write_from, "hi": hi},
    )


def _drop_jobs_partitions(conn: Connection, by_partition: list[tuple[str, int]]) -> list[str]:
    """Each partition of `jobs` all of whose rows are the archive's jobs, detached and dropped
    (under the transaction's lock on `jobs`); the default partition is never dropped (it takes
    every id no other one does). The dropped partitions' names.

    `by_partition` (the archive's jobs counted by partition before the lock, a join over the
    archive's list) is checked under the lock by a count of each partition's rows alone: every
    job of the archive still had its row then (`_MOVED`), a window's rows come only from jobs
    made in that window (ids are made by the clock) and leave only by an archive, so a
    partition with as many rows as archived jobs holds nothing else."""
    dropped = []
    for part, archived in by_partition:
        window = _JOBS_PARTITION.match(part)
        if window is None:
            continue
        rows = conn.execute(text(f"SELECT count(*) FROM {part}")).scalar_one()
        if rows != archived:
            continue  # it holds live jobs (or jobs of no archive): its archived rows are deleted
        conn.execute(text(_UNCOUNT.format(part=part)))
        conn.execute(text(f"ALTER TABLE jobs DETACH PARTITION {part}"))
        conn.execute(text(f"DROP TABLE {part}"))
        if window.group(1) is not None:
            conn.execute(
                text("UPDATE jobs_partitions SET dropped_at = now() WHERE lower_ms = :lo"),
                {"lo": int(window.group(1))},
            )
        dropped.append(part)
    return dropped


def _delete_job_rows(conn: Connection, record: ArchiveRecord) -> None:
    name = "events_no_delete"
    trigger = conn.execute(_SQLITE_TRIGGER, {"name": name}).scalar_one()
    conn.execute(text(f"DROP TRIGGER {name}"))
    conn.execute(
        text(f"DELETE FROM events AS e WHERE e.position < :hi AND {_ARCHIVED_STREAM}"),
        {"hi": record.write_to, "id": record.archive_id},
    )
    conn.execute(text(trigger))  # the refusal again, as its migration made it, before commit

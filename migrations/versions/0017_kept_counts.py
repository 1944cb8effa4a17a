"""Kept counts: a summary, a scrape or a status reads groups, never every job.

At a million jobs, `/metrics`, `audit summary`, the console's counts and `outcomes status`
each counted every row of `jobs` (and the metrics' findings read the reconciler's events from
position 0 in each new process). From here the counts are kept as rows change:

- `job_counts` (by account, tool, accepted, status and code), `job_counts_hourly` (the same by
  the jobs' creation hour, for since/until) and `finding_counts` (the reconciler's findings by
  type and cause, with the newest one's time).
- Postgres: triggers on `jobs` and `events` insert delta rows (`job_count_deltas`,
  `finding_count_deltas`) in the writer's own transaction; `outcomes_compact_counts()` folds
  them into the totals; readers sum both (migrations/functions/outcomes_counts.sql, snapshotted
  as 0017_outcomes_counts.sql). No row is updated by every writer, so writers still commit side
  by side. `outcomes_recount()` counts everything again (a rebuild's last step).
- SQLite: its writers are serialized, so triggers update the totals directly.
- `ix_jobs_created_at`: the partial hours at the ends of a since/until range are counted from
  the jobs themselves, through it.

The counts of the ledger as it stands are filled in here, after the triggers exist: creating
them locks `jobs` and `events` against writers until this migration commits, so nothing
changes between the count and the first delta.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

HERE = Path(__file__).parent
FUNCTIONS = HERE / "0017_outcomes_counts.sql"
FINDING_TYPES = "('job.redispatched', 'work.retry_scheduled', 'job.outcome_missing')"
KEY = ("account", "tool", "accepted", "status", "code")
GROUP = ", ".join(KEY)
# A group's columns changed (not a lease, an attempt count or a position alone).
POSTGRES_GROUP_CHANGED = (
    f"({', '.join('OLD.' + c for c in (*KEY, 'created_at'))}) IS DISTINCT FROM "
    f"({', '.join('NEW.' + c for c in (*KEY, 'created_at'))})"
)
# A rebuild rewrites every row and counts them whole afterwards.
NOT_RECOUNTING = "current_setting('outcomes.recounting', true) IS DISTINCT FROM 'on'"
POSTGRES_TRIGGERS = [
    "CREATE TRIGGER jobs_counted_insert AFTER INSERT ON jobs FOR EACH ROW "
    f"WHEN ({NOT_RECOUNTING}) EXECUTE FUNCTION outcomes_count_job()",
    "CREATE TRIGGER jobs_counted_update AFTER UPDATE ON jobs FOR EACH ROW "
    f"WHEN ({POSTGRES_GROUP_CHANGED} AND {NOT_RECOUNTING}) "
    "EXECUTE FUNCTION outcomes_count_job()",
    "CREATE TRIGGER jobs_counted_delete AFTER DELETE ON jobs FOR EACH ROW "
    f"WHEN ({NOT_RECOUNTING}) EXECUTE FUNCTION outcomes_count_job()",
    "CREATE TRIGGER events_findings_counted AFTER INSERT ON events FOR EACH ROW "
    f"WHEN (NEW.actor = 'reconciler' AND NEW.type IN {FINDING_TYPES}) "
    "EXECUTE FUNCTION outcomes_count_finding()",
]
POSTGRES_DROPS = [
    "DROP TRIGGER events_findings_counted ON events",
    "DROP TRIGGER jobs_counted_delete ON jobs",
    "DROP TRIGGER jobs_counted_update ON jobs",
    "DROP TRIGGER jobs_counted_insert ON jobs",
    "DROP FUNCTION outcomes_recount()",
    "DROP FUNCTION outcomes_compact_counts()",
    "DROP FUNCTION outcomes_count_finding()",
    "DROP FUNCTION outcomes_count_job()",
]

# SQLite: the hour from the stored text (UTC, as SQLAlchemy stores it), its whole seconds alone:
# SQLite's time functions round to the millisecond, which would put 12:59:59.9999 in hour 13.
# Each change is applied to both totals at once.
_SQLITE_HOUR = "CAST(strftime('%s', substr({row}.created_at, 1, 19)) AS INTEGER) / 3600"


def _sqlite_add(row: str, delta: str) -> str:
    values = f"{row}.account, {row}.tool, {row}.accepted, {row}.status, coalesce({row}.code, '')"
    return f"""
    INSERT INTO job_counts ({GROUP}, jobs) VALUES ({values}, {delta})
    ON CONFLICT ({GROUP}) DO UPDATE SET jobs = jobs + ({delta});
    INSERT INTO job_counts_hourly (hour, {GROUP}, jobs)
    VALUES ({_SQLITE_HOUR.format(row=row)}, {values}, {delta})
    ON CONFLICT (hour, {GROUP}) DO UPDATE SET jobs = jobs + ({delta});"""


_SQLITE_CHANGED = " OR ".join(f"OLD.{c} IS NOT NEW.{c}" for c in (*KEY, "created_at"))
_SQLITE_CAUSE = (
    "coalesce(nullif(json_extract(NEW.data, '$.error.cause'), ''), "
    "nullif(json_extract(NEW.data, '$.evidence'), ''), 'dispatch_deadline')"
)
SQLITE_TRIGGERS = [
    f"CREATE TRIGGER jobs_counted_insert AFTER INSERT ON jobs BEGIN {_sqlite_add('NEW', '1')} END",
    f"CREATE TRIGGER jobs_counted_update AFTER UPDATE ON jobs WHEN {_SQLITE_CHANGED} BEGIN "
    f"{_sqlite_add('OLD', '-1')} {_sqlite_add('NEW', '1')} END",
    f"CREATE TRIGGER jobs_counted_delete AFTER DELETE ON jobs BEGIN {_sqlite_add('OLD', '-1')} END",
    "CREATE TRIGGER events_findings_counted AFTER INSERT ON events "
    f"WHEN NEW.actor = 'reconciler' AND NEW.type IN {FINDING_TYPES} BEGIN "
    f"INSERT INTO finding_counts (type, cause, events, last_at) "
    f"VALUES (NEW.type, {_SQLITE_CAUSE}, 1, NEW.recorded_at) "
    "ON CONFLICT (type, cause) DO UPDATE "
    "SET events = events + 1, last_at = max(last_at, excluded.last_at); END",
]
SQLITE_DROPS = [
    "DROP TRIGGER events_findings_counted",
    "DROP TRIGGER jobs_counted_delete",
    "DROP TRIGGER jobs_counted_update",
    "DROP TRIGGER jobs_counted_insert",
]
SQLITE_BACKFILL = [
    f"""INSERT INTO job_counts_hourly (hour, {GROUP}, jobs)
    SELECT {_SQLITE_HOUR.format(row="jobs")}, account, tool, accepted, status,
           coalesce(code, ''), count(*)
      FROM jobs GROUP BY 1, 2, 3, 4, 5, 6""",
    f"""INSERT INTO job_counts ({GROUP}, jobs)
    SELECT {GROUP}, sum(jobs) FROM job_counts_hourly GROUP BY {GROUP}""",
    f"""INSERT INTO finding_counts (type, cause, events, last_at)
    SELECT type, cause, count(*), max(recorded_at) FROM (
        SELECT type, {_SQLITE_CAUSE.replace("NEW.", "")} AS cause, recorded_at FROM events
         WHERE actor = 'reconciler' AND type IN {FINDING_TYPES}
    ) GROUP BY type, cause""",
]


def _key() -> list[sa.Column[object]]:
    return [
        sa.Column("account", sa.String(100), nullable=False),
        sa.Column("tool", sa.String(200), nullable=False),
        sa.Column("accepted", sa.Boolean(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("code", sa.String(64), nullable=False),
    ]


def _tables() -> None:
    op.create_table(
        "job_counts",
        *_key(),
        sa.Column("jobs", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(*KEY, name="pk_job_counts"),
    )
    op.create_table(
        "job_counts_hourly",
        sa.Column("hour", sa.BigInteger(), nullable=False, autoincrement=False),
        *_key(),
        sa.Column("jobs", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("hour", *KEY, name="pk_job_counts_hourly"),
    )
    op.create_table(
        "job_count_deltas",
        sa.Column("hour", sa.BigInteger(), nullable=False),
        *_key(),
        sa.Column("jobs", sa.Integer(), nullable=False),
    )
    op.create_table(
        "finding_counts",
        sa.Column("type", sa.String(64), nullable=False),
        sa.Column("cause", sa.Text(), nullable=False),
        sa.Column("events", sa.BigInteger(), nullable=False),
        sa.Column("last_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("type", "cause", name="pk_finding_counts"),
    )
    op.create_table(
        "finding_count_deltas",
        sa.Column("type", sa.String(64), nullable=False),
        sa.Column("cause", sa.Text(), nullable=False),
        sa.Column("events", sa.Integer(), nullable=False),
        sa.Column("last_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_jobs_created_at", "jobs", ["created_at"])


def upgrade() -> None:
    _tables()
    if op.get_bind().dialect.name == "postgresql":
        op.execute(FUNCTIONS.read_text())
        for statement in POSTGRES_TRIGGERS:
            op.execute(statement)
        op.execute("SELECT outcomes_recount()")
        return
    for statement in SQLITE_TRIGGERS:
        op.execute(statement)
    for statement in SQLITE_BACKFILL:
        op.execute(statement)


def downgrade() -> None:
    drops = POSTGRES_DROPS if op.get_bind().dialect.name == "postgresql" else SQLITE_DROPS
    for statement in drops:
        op.execute(statement)
    op.drop_index("ix_jobs_created_at", table_name="jobs")
    for table in (
        "finding_count_deltas",
        "finding_counts",
        "job_count_deltas",
        "job_counts_hourly",
        "job_counts",
    ):
        op.drop_table(table)

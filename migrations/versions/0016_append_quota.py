"""Postgres: the append function answers a new job's quota and an idempotency hit itself.

`outcomes_append_jobs` takes a new job's quota (`quota`: its limit and the window's start)
and answers status `quota`, with the oldest counted job's creation, when the account already
has that many jobs of the tool accepted in the window: counted under the account's and tool's
lock, which the call now takes in key order with its other keys. An idempotency hit answers
with the holder's view as well as its id. So every submit is one call in the process's group
commit (read, decide, append, map the status): a tool with a quota, or a replayed key, no
longer takes a transaction of its own with a lock, a count and a read.

The migration runs its own snapshot of the whole function, `0016_outcomes_append_jobs.sql`
(`migrations/functions/outcomes_append_jobs.sql` as of this revision). Same name, argument
and result (`CREATE OR REPLACE` keeps the grants); a caller that sends no `quota` gets 0014's
answers.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-03
"""

from __future__ import annotations

from pathlib import Path

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

HERE = Path(__file__).parent


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute((HERE / "0016_outcomes_append_jobs.sql").read_text())


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute((HERE / "0014_outcomes_append_jobs.sql").read_text())

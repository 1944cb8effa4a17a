"""Postgres: the windows of `jobs` are made apart from the partitions of `events`.

The partitions' maker made both in one transaction, so a window of `jobs` it could not attach
undid the partitions of `events` made before it. Attaching a window locks `jobs_default`
exclusively, and any open reader of `jobs` holds that lock's weaker form: an `audit verify`
reads the read models in one snapshot for its whole pass (minutes at 1M jobs, hours at 100M).
For that long the maker made nothing, and once the partitions ahead were used up, every write
failed for want of a partition. Seen at 1M jobs: a call of the maker for a window then
due, made while the growth benchmark's `audit verify` ran, ended in a lock timeout.

Now the windows are made in a block of their own: a lock not had gives up the windows alone
(a new job lands in the default partition meanwhile, and moves into its window when it is
made), and the partitions of `events` stay made.

The migration runs its own snapshot of the partitions' functions
(`0027_outcomes_partitions.sql`: `migrations/functions/outcomes_partitions.sql` as of this
revision).

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-07
"""

from __future__ import annotations

from pathlib import Path

from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

HERE = Path(__file__).parent


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute((HERE / "0027_outcomes_partitions.sql").read_text())


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute((HERE / "0026_outcomes_partitions.sql").read_text())

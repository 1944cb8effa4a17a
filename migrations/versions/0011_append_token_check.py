"""Postgres: the append function re-checks the submitting token, and is kept whole in a file.

`outcomes_append_jobs` answers a new status, `revoked`, for an item whose `token_id` names a
token revoked by then (nothing is written for it). An API process admits a presented token
from its cache, without a read; the decision's own append proves the token is still good, in
the transaction that records the decision and under the append lock that a revocation also
takes: a token revoked before the submit's append is refused by it, so a revoked token is
refused on its next request by every process, and the check costs one index probe per call
and token instead of a round trip per request.

The function is no longer written as patches to an earlier migration's text: this migration
runs its own snapshot of the whole function, `0011_outcomes_append_jobs.sql`, a copy of the
current one (`migrations/functions/outcomes_append_jobs.sql`). Same name, argument and result as
0009's (`CREATE OR REPLACE` keeps the grants).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

SNAPSHOT = Path(__file__).with_name("0011_outcomes_append_jobs.sql")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(SNAPSHOT.read_text())


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        path = Path(__file__).with_name("0009_idempotency_probe.py")
        spec = importlib.util.spec_from_file_location("outcomes_migration_0009", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        op.execute(module.FUNCTION)

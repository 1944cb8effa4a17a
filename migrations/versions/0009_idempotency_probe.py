"""Postgres: a keyed submit's idempotency lookup is a cached statement again, planned to use
the unique index however few jobs the ledger holds.

0007 made the lookup an `EXECUTE`, planned at every call, because a plan cached while `jobs`
was empty walked `ix_jobs_quota` (account, tool, created_at) over every job of the account:
on an empty table each index is estimated at one row, and that one won the tie. Parsing and
planning at every call cost more than 0007 measured: about 70 µs of the 290 µs of server CPU
a keyed new job's call takes (the call replayed 2,000 times into fresh ledgers, with and
without the lookup; a scratch script reading the backend's CPU time).

The lookup now also says `(account, idempotency_key) >= (…, …)`, which is true of the row it
looks for. Only the unique index on those two columns can take that row comparison as an index
condition; for `ix_jobs_quota` it is one more filter evaluated per row, so even on an empty
table's estimates the unique index costs less and is chosen, and the plan is cached for the
session as PL/pgSQL caches any statement's. After `ANALYZE` the statistics choose it anyway.
`tests/persistence/test_append_plans.py` reads the server's index counters: every lookup on a
new ledger goes through the unique index and none through `ix_jobs_quota`.

Same name, argument and result as 0008's function (`CREATE OR REPLACE` keeps the grants);
only the lookup's text changes.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def _migration(name: str) -> ModuleType:
    """An earlier migration's module, loaded from its file (migrations are not a package)."""
    path = Path(__file__).with_name(name)
    spec = importlib.util.spec_from_file_location(f"outcomes_migration_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_0008 = _migration("0008_append_cpu.py")
APPEND_LOCK_KEY: int = _0008.APPEND_LOCK_KEY
BRAKE_LOCK_KEY: int = _0008.BRAKE_LOCK_KEY

PLANNED_EACH_CALL = """\
            EXECUTE 'SELECT j.job_id FROM jobs j
                      WHERE j.account = $1 AND j.idempotency_key = $2'
               INTO found USING job->>'account', job->>'idempotency_key';
"""
CACHED = """\
            key_account := job->>'account';  -- plain text parameters, as the index's columns
            key_value := job->>'idempotency_key';
            -- The row comparison only the unique index can take as an index condition.
            SELECT j.job_id INTO found FROM jobs j
             WHERE j.account = key_account AND j.idempotency_key = key_value
               AND (j.account, j.idempotency_key) >= (key_account, key_value);
"""
DECLARED = "    found text;\n"
KEY_VARIABLES = "    found text;\n    key_account text;\n    key_value text;\n"
for _part in (PLANNED_EACH_CALL, DECLARED):
    if _0008.FUNCTION.count(_part) != 1:
        raise RuntimeError(f"0009 rewrites a part of 0008's function it did not find: {_part!r}")
FUNCTION: str = _0008.FUNCTION.replace(PLANNED_EACH_CALL, CACHED).replace(DECLARED, KEY_VARIABLES)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(FUNCTION)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_0008.FUNCTION)

"""Postgres: the append function's reads keep good plans.

- The brake read. 0005's `outcomes_brakes_holding` was a SQL-language function. Called from
  the append function (once per submit and claim item) it was never inlined, so Postgres
  parsed and planned its body at every call: about 150 µs of server CPU each time, on an
  empty ledger. The same query in PL/pgSQL keeps its plan for the session (about 12 µs). Same
  name, arguments, result and privileges (`CREATE OR REPLACE` keeps the grants), so revoking
  it still fails closed.
- The idempotency lookup of a new job. PL/pgSQL caches a statement's plan for the session;
  made while `jobs` was empty (a new ledger, before autovacuum's first ANALYZE), it walked
  `ix_jobs_quota` over every job of the account and filtered on the key, so each keyed
  submit cost more than the one before (1.4 ms after 3,000 jobs of one account, 0.7 ms of
  it in that lookup). The lookup is now planned at each call (`EXECUTE`, about 25 µs more),
  against the table as it is: the unique index, whatever the statistics say.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

QUERY = """
    SELECT jsonb_agg(jsonb_build_object(
               'brake_id', p.data->>'brake_id', 'scope', p.data->>'scope',
               'reason', p.data->>'reason', 'operator', p.data->>'operator',
               'pulled_at', p.recorded_at, 'active', true, 'ledger_position', p.position)
           ORDER BY p.recorded_at, p.data->>'brake_id'){into}
      FROM events p
     WHERE p.type = 'brake.pulled'
       AND (p_scopes IS NULL  -- every scope: the brakes that hold anywhere
            OR p.data->>'scope' IN (SELECT jsonb_array_elements_text(p_scopes)))
       AND NOT EXISTS (SELECT 1 FROM events r
                        WHERE r.stream_id = p.stream_id AND r.stream_version > p.stream_version)
"""

PLPGSQL = f"""
CREATE OR REPLACE FUNCTION outcomes_brakes_holding(p_scopes jsonb) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    held jsonb;
BEGIN
    {QUERY.format(into=" INTO held")};
    RETURN held;
END $$
"""

SQL = f"""
CREATE OR REPLACE FUNCTION outcomes_brakes_holding(p_scopes jsonb) RETURNS jsonb
LANGUAGE sql STABLE AS $${QUERY.format(into="")}$$
"""


STATIC_LOOKUP = """            SELECT j.job_id INTO found FROM jobs j
             WHERE j.account = job->>'account' AND j.idempotency_key = job->>'idempotency_key';"""
PLANNED_LOOKUP = """            EXECUTE 'SELECT j.job_id FROM jobs j
                      WHERE j.account = $1 AND j.idempotency_key = $2'
               INTO found USING job->>'account', job->>'idempotency_key';"""


def _migration(name: str) -> ModuleType:
    """An earlier migration's module, loaded from its file (migrations are not a package)."""
    path = Path(__file__).with_name(name)
    spec = importlib.util.spec_from_file_location(f"outcomes_migration_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def append_function_0005() -> str:
    """The append function as 0005 left it."""
    return str(_migration("0005_ledger_chain.py").append_function())


def append_function() -> str:
    """The append function as this migration leaves it: 0005's, its lookup planned per call."""
    function = append_function_0005()
    assert function.count(STATIC_LOOKUP) == 1, "0005's function has changed"
    return function.replace(STATIC_LOOKUP, PLANNED_LOOKUP)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(PLPGSQL)
        op.execute(append_function())


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(append_function_0005())
        op.execute(SQL)

"""Postgres: the brake read keeps its plan.

0005's `outcomes_brakes_holding` was a SQL-language function. Called from the append function
(once per submit and claim item) it was never inlined, so Postgres parsed and planned its
body at every call: about 150 µs of server CPU each time, on an empty ledger. The same query
in PL/pgSQL keeps its plan for the session (about 20 µs). Same name, arguments, result and
privileges (`CREATE OR REPLACE` keeps the grants), so revoking it still fails closed.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

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


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(PLPGSQL)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(SQL)

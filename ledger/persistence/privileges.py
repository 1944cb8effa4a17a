"""PostgreSQL roles: the application role's privileges, and who a connection acts as.

The grants are generic, so tables that later migrations add are covered when `outcomes
migrate` applies them again (it does, every run): everything in the schema is readable and
writable (the kept counts included: every writer's triggers insert their deltas, and any
process may fold them, `outcomes_compact_counts()`), then the recorded history (`events`,
`ledger_meta`) is cut back to read and append, and Alembic's bookkeeping to read. The script
starts by revoking what the role held, so its result does not depend on what was granted
before. It is plain SQL, printed as it is run (`outcomes migrate --print-grants`), and refuses
a role that could rewrite history.
"""

from __future__ import annotations

import psycopg
from sqlalchemy import Connection, text

from ledger.persistence.schema import APP_ROLE_CONSTRAINT
from ledger.privileges import ConnectedRole

# Tables of recorded history: the application reads and appends, never changes or removes.
# A verification's record is evidence too: `audit verify` run as the application role inserts
# it, and no one but the owner can make an old failure read as a pass.
# The Merkle tree's stored subtrees too: the sequencer adds them, nothing changes one.
APPEND_ONLY_TABLES = (
    "events",
    "ledger_meta",
    "ledger_order",
    "verifications",
    "merkle_nodes",
    "merkle_gaps",
)  # once added
# Alembic's bookkeeping, and what only the owner writes: the partitions' list (the owner's
# function makes them) and the archives (`outcomes archive`, run by the owner).
# `ledger_tree` (where the tree starts, as the migration built it) is the owner's on Postgres,
# and so is `ledger_sequencer` (where the sequencer stood at migration 0015: only migrations
# write it; the ticks since are `ledger_ticks`'s).
READ_ONLY_TABLES = (
    "alembic_version",
    "ledger_partitions",
    "jobs_partitions",
    "archives",
    "archived_jobs",
    "ledger_tree",
    "ledger_sequencer",
)
# The sequencer's ticks (`outcomes_sequence`): a tick inserts its row and deletes the one a
# hundred ticks older; no tick changes a row. The sequencer runs as the application role (in
# every reconciler, and in any reader in ledger order), so it keeps those two (docs/security.md).
TICK_TABLES = ("ledger_ticks",)
_NEVER_ON_TICKS = "UPDATE, TRUNCATE, REFERENCES, TRIGGER"
# Postgres checks a write through a partitioned table against the parent's privileges alone,
# so the partitions themselves grant nothing: no row of them is reachable around the parent's
# append-only rules (nor, for `jobs`, around the parent's triggers that keep the counts).
PARTITIONED_TABLES = ("events", "ledger_order", "jobs")
_NEVER_ON_HISTORY = "UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER"
_NEVER_ON_READ_ONLY = "INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER"

_CONNECTED = text(
    """
    SELECT r.rolname, r.rolsuper,
           coalesce(pg_has_role(r.oid, c.relowner, 'MEMBER'), false) AS owns_events
      FROM pg_roles r
      LEFT JOIN pg_class c ON c.oid = to_regclass('events')
     WHERE r.rolname = current_user
    """
)


def ident(name: str) -> str:
    """A quoted SQL identifier (the script is printed too, so no driver does the quoting)."""
    return '"' + name.replace('"', '""') + '"'


def literal(value: str) -> str:
    """A SQL string literal (standard_conforming_strings, on by default since PostgreSQL 9.1)."""
    return "'" + value.replace("'", "''") + "'"


def _create_role(role: str) -> str:
    # Roles are cluster-wide: two migrations (or test processes) may create it at once, and
    # the loser sees duplicate_object or the unique index's unique_violation.
    return f"""DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = {literal(role)}) THEN
        CREATE ROLE {ident(role)} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION;
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;  -- created meanwhile by another migration
END $$"""


def _refuse_the_powerful(role: str, schema: str) -> str:
    # Membership counts: a member of the owner's role may SET ROLE to it. A superuser is a
    # member of every role. NULL (no events table yet) is not true, so it refuses nothing.
    events = literal(f"{ident(schema)}.{ident('events')}")
    return f"""DO $$
DECLARE
    owner oid := (SELECT relowner FROM pg_class WHERE oid = to_regclass({events}));
BEGIN
    IF EXISTS (SELECT FROM pg_roles r
                WHERE r.rolname = {literal(role)}
                  AND (r.rolsuper
                       OR pg_has_role(r.oid, owner, 'MEMBER')
                       OR pg_has_role(r.oid, current_user, 'MEMBER'))) THEN
        RAISE EXCEPTION 'role % could rewrite the ledger (a superuser, or the owner of events '
                        'or a member of its role): choose an application role of its own',
                        {literal(role)}
            USING ERRCODE = 'insufficient_privilege', CONSTRAINT = {literal(APP_ROLE_CONSTRAINT)};
    END IF;
END $$"""


def _revoke_if_present(table: str, schema: str, privileges: str, role: str) -> str:
    # A DO block: `ledger_meta` exists only once the migration that adds it has run.
    qualified = f"{ident(schema)}.{ident(table)}"
    return f"""DO $$
BEGIN
    IF to_regclass({literal(qualified)}) IS NOT NULL THEN
        REVOKE {privileges} ON {qualified} FROM {ident(role)}, PUBLIC;
    END IF;
END $$"""


def _revoke_on_partitions(schema: str, role: str) -> str:
    parents = ", ".join(literal(f"{ident(schema)}.{ident(t)}") for t in PARTITIONED_TABLES)
    return f"""DO $$
DECLARE
    part regclass;
BEGIN
    FOR part IN SELECT h.inhrelid::regclass FROM pg_inherits h
                 WHERE h.inhparent IN (SELECT to_regclass(p) FROM unnest(ARRAY[{parents}]) p)
    LOOP
        EXECUTE format('REVOKE ALL ON %s FROM %I, PUBLIC', part, {literal(role)});
    END LOOP;
END $$"""


def grant_statements(role: str, schema: str) -> list[str]:
    """The statements, in order, that create `role` if missing and grant it what the API,
    workers and reconciler need in `schema` (run as the owner of the ledger's tables)."""
    who, where = ident(role), ident(schema)
    return [
        _create_role(role),
        _refuse_the_powerful(role, schema),
        f"GRANT USAGE ON SCHEMA {where} TO {who}",
        f"REVOKE ALL ON ALL TABLES IN SCHEMA {where} FROM {who}",
        f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA {where} FROM {who}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {where} TO {who}",
        f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {where} TO {who}",
        f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {where} TO {who}",
        *(_revoke_if_present(t, schema, _NEVER_ON_HISTORY, role) for t in APPEND_ONLY_TABLES),
        *(_revoke_if_present(t, schema, _NEVER_ON_READ_ONLY, role) for t in READ_ONLY_TABLES),
        *(_revoke_if_present(t, schema, _NEVER_ON_TICKS, role) for t in TICK_TABLES),
        _revoke_on_partitions(schema, role),
    ]


def grant_script(role: str, schema: str) -> str:
    """`grant_statements` as one SQL script, to print or to run with psql."""
    header = (
        f"-- Outcome Ledger: the application role {ident(role)} and its privileges.\n"
        f"-- Run as the owner of the ledger's tables (schema {ident(schema)}), after every\n"
        "-- migration; `outcomes migrate --app-role` does both. Passwords are not set here:\n"
        f"--   ALTER ROLE {ident(role)} PASSWORD '...';\n"
    )
    return header + "".join(f"{statement};\n" for statement in grant_statements(role, schema))


def current_schema(conn: Connection) -> str:
    """The schema the ledger's tables live in (the first of the search path that exists)."""
    schema = conn.execute(text("SELECT current_schema()")).scalar_one_or_none()
    return str(schema or "public")


def apply_grants(conn: Connection, role: str, password: str | None) -> None:
    """Create `role` if missing, grant it its privileges and, if given, set its password."""
    statements = grant_statements(role, current_schema(conn))
    if password is not None:
        statements.append(f"ALTER ROLE {ident(role)} PASSWORD {literal(password)}")
    # Through the driver, without parameters: '%' in the DO blocks (and in a password) is
    # text, not a placeholder. Same connection, so same transaction.
    driver = conn.connection.driver_connection
    assert isinstance(driver, psycopg.Connection)
    for statement in statements:
        driver.execute(statement.encode())


def connected_role(conn: Connection) -> ConnectedRole:
    """The role this connection acts as: a superuser? may it act as the owner of `events`?"""
    row = conn.execute(_CONNECTED).one()
    return ConnectedRole(name=row.rolname, superuser=row.rolsuper, owns_events=row.owns_events)

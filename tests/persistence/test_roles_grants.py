"""`outcomes migrate --app-role` and `--print-grants`: the same privileges either way, again on
every run (tables added later included, `ledger_meta` kept append-only), races handled, and a
clear no where there are no roles (SQLite) or the role could rewrite history."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner, Result
from psycopg import sql

from cli.main import cli
from ledger.persistence import migrate
from ledger.persistence.engine import make_engine
from tests.databases import (
    APP_ROLE,
    PG_ADMIN_DSN,
    admin_execute,
    create_database,
    drop_database,
    pg_url,
    unique_name,
)

postgres = pytest.mark.postgres

# What the application role may do, object by object (has_*_privilege: PUBLIC's grants count).
EXPECTED = {
    "alembic_version": {"SELECT"},
    "brakes": {"SELECT", "INSERT", "UPDATE", "DELETE"},
    "events": {"SELECT", "INSERT"},
    "ledger_meta": {"SELECT", "INSERT"},
    "ledger_order": {"SELECT", "INSERT"},  # given by the sequencer, then never changed
    "merkle_nodes": {"SELECT", "INSERT"},  # the tree's subtrees: added once, never changed
    "merkle_gaps": {"SELECT", "INSERT"},  # SQLite's skipped positions (empty on Postgres)
    "ledger_tree": {"SELECT"},  # where migration 0021 started the tree: the owner's
    # The sequencer's own (issue 47, Low): where it stood at 0015 is the owner's; a tick
    # inserts its row and deletes the one a hundred older, and changes none.
    "ledger_sequencer": {"SELECT"},
    "ledger_ticks": {"SELECT", "INSERT", "DELETE"},
    "jobs": {"SELECT", "INSERT", "UPDATE", "DELETE"},
    # Kept counts: writers' triggers insert deltas, a fold deletes them and updates totals.
    "job_counts": {"SELECT", "INSERT", "UPDATE", "DELETE"},
    "job_counts_hourly": {"SELECT", "INSERT", "UPDATE", "DELETE"},
    "job_count_deltas": {"SELECT", "INSERT", "UPDATE", "DELETE"},
    "finding_counts": {"SELECT", "INSERT", "UPDATE", "DELETE"},
    "finding_count_deltas": {"SELECT", "INSERT", "UPDATE", "DELETE"},
    "leases": {"SELECT", "INSERT", "UPDATE", "DELETE"},
    "dispatches": {"SELECT", "INSERT", "UPDATE", "DELETE"},
    "queue_epochs": {"SELECT", "INSERT", "UPDATE", "DELETE"},
    "rate_buckets": {"SELECT", "INSERT", "UPDATE", "DELETE"},
    "tokens": {"SELECT", "INSERT", "UPDATE", "DELETE"},
    "webhooks": {"SELECT", "INSERT", "UPDATE", "DELETE"},
    "webhook_cursor": {"SELECT", "INSERT", "UPDATE", "DELETE"},
    "webhook_deliveries": {"SELECT", "INSERT", "UPDATE", "DELETE"},
    "webhook_attempts": {"SELECT", "INSERT", "UPDATE", "DELETE"},
    "webhook_attempts_attempt_id_seq": {"USAGE", "SELECT"},
    "verifications": {"SELECT", "INSERT"},  # a verification's record: evidence, insert-only
    "verifications_id_seq": {"USAGE", "SELECT"},
    "read_model_rebuild": {"SELECT", "INSERT", "UPDATE", "DELETE"},
    "events_position_seq": {"USAGE", "SELECT"},
    "outcomes_append_jobs(jsonb)": {"EXECUTE"},
    # Written by the owner alone (0018, 0020): the partitions' lists and the archives.
    "ledger_partitions": {"SELECT"},
    "jobs_partitions": {"SELECT"},
    "archives": {"SELECT"},
    "archived_jobs": {"SELECT"},
    "outcomes_make_partitions(integer)": {"EXECUTE"},
}
TABLE_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER")
SEQUENCE_PRIVILEGES = ("USAGE", "SELECT", "UPDATE")

_PRIVILEGES = """
SELECT c.relname, c.relkind, coalesce(c.relacl::text, '')
  FROM pg_class c
 WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p', 'S')
   AND NOT c.relispartition
"""
# The partitions of `events` and `ledger_order` (0018): nothing, writes go through the parents.
_PARTITION_PRIVILEGES = """
SELECT c.relname FROM pg_class c WHERE c.relispartition
   AND (has_table_privilege(%(role)s, c.oid, 'SELECT') OR has_table_privilege(%(role)s, c.oid,
        'INSERT') OR has_table_privilege(%(role)s, c.oid, 'UPDATE')
        OR has_table_privilege(%(role)s, c.oid, 'DELETE')
        OR has_table_privilege(%(role)s, c.oid, 'TRUNCATE'))
"""


def privileges(url_or_name: str, role: str = APP_ROLE) -> dict[str, object]:
    """What `role` may do in the database, effective and as stored (the ACLs)."""
    name = url_or_name.rsplit("/", 1)[-1]
    found: dict[str, object] = {}
    with psycopg.connect(PG_ADMIN_DSN, dbname=name) as conn:
        for relname, kind, acl in conn.execute(_PRIVILEGES):
            check, wanted = (
                ("has_table_privilege", TABLE_PRIVILEGES)
                if kind in ("r", "p")
                else ("has_sequence_privilege", SEQUENCE_PRIVILEGES)
            )
            held = {
                p
                for p in wanted
                if conn.execute(
                    sql.SQL("SELECT {}(%s, %s, %s)").format(sql.Identifier(check)),
                    (role, relname, p),
                ).fetchone()
                == (True,)
            }
            found[relname] = held
            found[f"acl {relname}"] = acl
        row = conn.execute(
            "SELECT has_function_privilege(%s, 'outcomes_append_jobs(jsonb)', 'EXECUTE')",
            (role,),
        ).fetchone()
        found["outcomes_append_jobs(jsonb)"] = {"EXECUTE"} if row == (True,) else set()
        row = conn.execute(
            "SELECT has_function_privilege(%s, 'outcomes_make_partitions(integer)', 'EXECUTE')",
            (role,),
        ).fetchone()
        found["outcomes_make_partitions(integer)"] = {"EXECUTE"} if row == (True,) else set()
        reachable = [r[0] for r in conn.execute(_PARTITION_PRIVILEGES, {"role": role})]
        if reachable:
            found["partitions reachable"] = reachable
    return found


def effective(found: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in found.items() if not k.startswith("acl ")}


@pytest.fixture
def migrated(pg_template: str) -> Iterator[str]:
    """A fresh database migrated by its owner (postgres) without any --app-role."""
    name = unique_name("outcomes_grants")
    create_database(name)
    engine = make_engine(pg_url(name))
    migrate.upgrade(engine)
    engine.dispose()
    yield pg_url(name)
    drop_database(name)


def outcomes(url: str, *args: str, ok: bool = True) -> Result:
    result = CliRunner().invoke(
        cli, list(args), env={"OUTCOMES_DATABASE_URL": url}, catch_exceptions=False
    )
    if ok:
        assert result.exit_code == 0, f"outcomes {' '.join(args)}: {result.output}"
    return result


@postgres
def test_printed_grants_applied_give_what_migrate_gives(migrated: str, pg_database: str) -> None:
    assert effective(privileges(migrated)) != EXPECTED  # nothing granted yet
    script = outcomes(migrated, "migrate", "--print-grants", "--app-role", APP_ROLE).stdout
    assert "GRANT" in script and "PASSWORD '...'" in script  # no password is printed
    assert effective(privileges(migrated)) != EXPECTED  # printing changed nothing
    with psycopg.connect(PG_ADMIN_DSN, dbname=migrated.rsplit("/", 1)[1]) as conn:
        conn.execute(script.encode())  # the whole script, as psql -f would run it
    # pg_database: migrated, then `migrate --app-role` (the template's), and migrate twice more.
    outcomes(pg_database, "migrate", "--app-role", APP_ROLE)
    again = outcomes(pg_database, "migrate", "--app-role", APP_ROLE, "--json")
    assert '"app_role":"outcomes_app_test"' in again.stdout
    assert effective(privileges(pg_database)) == EXPECTED
    assert privileges(migrated) == privileges(pg_database)  # ACLs too, entry for entry


@postgres
def test_grants_cover_tables_added_later_and_keep_ledger_meta_append_only(
    pg_database: str,
) -> None:
    name = pg_database.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN_DSN, dbname=name, autocommit=True) as conn:
        conn.execute(b"CREATE TABLE later_read_model (id bigserial PRIMARY KEY)")
        conn.execute(b"GRANT UPDATE, DELETE ON events TO PUBLIC")  # a careless hand
    outcomes(pg_database, "migrate", "--app-role", APP_ROLE)
    found = privileges(pg_database)
    assert found["ledger_meta"] == {"SELECT", "INSERT"}
    assert found["later_read_model"] == {"SELECT", "INSERT", "UPDATE", "DELETE"}
    assert found["later_read_model_id_seq"] == {"USAGE", "SELECT"}
    assert found["events"] == {"SELECT", "INSERT"}  # PUBLIC's grant revoked too


@postgres
def test_concurrent_migrations_create_the_same_new_role_once(pg_template: str) -> None:
    role = unique_name("outcomes_race")
    names = [unique_name("outcomes_race_db") for _ in range(2)]
    for name in names:
        create_database(name, template=pg_template)
    start = threading.Barrier(4)
    failures: list[BaseException] = []

    def grant(url: str) -> None:
        engine = make_engine(url)
        try:
            start.wait()  # (Alembic's upgrade is not thread-safe: the clones are migrated)
            migrate.grant(engine, role)
        except BaseException as exc:
            failures.append(exc)
        finally:
            engine.dispose()

    threads = [threading.Thread(target=grant, args=(pg_url(n),)) for n in names * 2]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert failures == []
        for name in names:
            assert effective(privileges(name, role)) == EXPECTED
    finally:
        for name in names:
            drop_database(name)
        admin_execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


@postgres
def test_a_role_that_could_rewrite_history_is_refused(pg_database: str) -> None:
    superuser = outcomes(pg_database, "migrate", "--app-role", "postgres", ok=False)
    member = unique_name("outcomes_member")  # a member of the owner's role may SET ROLE to it
    admin_execute(sql.SQL("CREATE ROLE {} IN ROLE postgres").format(sql.Identifier(member)))
    try:
        of_the_owner = outcomes(pg_database, "migrate", "--app-role", member, ok=False)
    finally:
        admin_execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(member)))
    for refused in (superuser, of_the_owner):
        assert refused.exit_code == 1
        assert "Error" not in refused.stderr
        assert "could rewrite the ledger" in refused.stderr


@pytest.mark.parametrize("args", [("--app-role", APP_ROLE), ("--print-grants", "--app-role", "x")])
def test_sqlite_says_it_has_no_roles(tmp_path: Path, args: tuple[str, ...]) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    refused = outcomes(url, "migrate", *args, ok=False)
    assert refused.exit_code == 1
    assert "SQLite has no database roles" in refused.stderr


def test_bad_role_names_and_missing_options_are_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    bad = outcomes(url, "migrate", "--app-role", 'x"; DROP TABLE events; --', ok=False)
    assert bad.exit_code == 1 and "bad role name" in bad.stderr
    assert outcomes(url, "migrate", "--print-grants", ok=False).exit_code == 2
    empty = outcomes(url, "migrate", "--app-role", "a", "--app-password-env", "NOPE", ok=False)
    assert empty.exit_code == 2 and "NOPE" in empty.stderr


@postgres
def test_the_password_comes_from_the_named_variable_and_is_never_printed(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    role = unique_name("outcomes_pw")
    secret = "s3cr%t'; --"  # quotes and '%' are text, not SQL or placeholders
    monkeypatch.setenv("APP_DB_PASSWORD", secret)
    try:
        done = outcomes(
            pg_database, "migrate", "--app-role", role, "--app-password-env", "APP_DB_PASSWORD"
        )
        assert secret not in done.output
        with psycopg.connect(PG_ADMIN_DSN) as conn:
            row = conn.execute("SELECT rolpassword FROM pg_authid WHERE rolname = %s", (role,))
            stored = row.fetchone()
        assert stored is not None and stored[0] is not None and secret not in stored[0]
        # A login role with its grants (the local server trusts names: the password is unused).
        name = pg_database.rsplit("/", 1)[1]
        with psycopg.connect(host="127.0.0.1", user=role, dbname=name) as conn:
            assert conn.execute("SELECT count(*) FROM events").fetchone() == (0,)
        printed = outcomes(pg_database, "migrate", "--print-grants", "--app-role", role)
        assert secret not in printed.output
    finally:
        with psycopg.connect(PG_ADMIN_DSN, dbname=pg_database.rsplit("/", 1)[1]) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        admin_execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))

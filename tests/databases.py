"""Test databases: a SQLite file per test, and a fresh Postgres database per test cloned from
a migrated template (fast, isolated, reachable by URL from other processes)."""

from __future__ import annotations

import itertools
import os

import psycopg
import pytest
from psycopg import sql
from sqlalchemy.engine import make_url

PG_ADMIN_DSN = os.environ.get(
    "OUTCOMES_TEST_PG_DSN", "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
)
PG_HOST = "postgres@127.0.0.1:5432"
# The application role the API and workers of the tests connect as (`outcomes migrate
# --app-role`): cluster-wide, so created once and shared by every test process; the template
# database grants it its privileges and every clone inherits them.
APP_ROLE = "outcomes_app_test"
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

_counter = itertools.count()


def postgres_available() -> str | None:
    """None when Postgres answers, else the reason it does not."""
    try:
        with psycopg.connect(PG_ADMIN_DSN, connect_timeout=3):
            return None
    except psycopg.Error as exc:
        return f"PostgreSQL unavailable: {exc}".splitlines()[0]


def require_postgres() -> None:
    """Skip on a laptop without Postgres; in CI a missing service is a failure."""
    reason = postgres_available()
    if reason is None:
        return
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: service-backed tests may not skip)")
    pytest.skip(reason)


def pg_url(dbname: str) -> str:
    return f"postgresql+psycopg://{PG_HOST}/{dbname}"


def as_role(url: str, role: str = APP_ROLE) -> str:
    """The same Postgres database, connecting as `role` (local connections trust any name)."""
    return make_url(url).set(username=role).render_as_string(hide_password=False)


def admin_execute(statement: sql.Composable) -> None:
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
        conn.execute(statement)


def create_database(name: str, template: str | None = None) -> None:
    drop_database(name)
    if template:
        admin_execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template)
            )
        )
    else:
        admin_execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def drop_database(name: str) -> None:
    admin_execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def unique_name(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{next(_counter)}"

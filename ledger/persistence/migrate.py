"""Schema migrations: the Alembic scripts in the top-level `migrations/` folder (beside
`ledger/` in a checkout and in site-packages alike), found as data and loaded by path, never
imported, so the core and its migrations form no import circle;
and on PostgreSQL the application role's grants, applied again after every upgrade so that the
tables a migration adds are covered (`ledger.persistence.privileges`)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, Engine, text

from ledger.persistence import privileges
from ledger.persistence.errors import translated

# ledger/persistence/migrate.py -> the folder holding `ledger/`, and so `migrations/`.
SCRIPT_LOCATION = Path(__file__).resolve().parents[2] / "migrations"
# pg_advisory_xact_lock key ("outc" "migr"): two `outcomes migrate` started at once (two
# deploy jobs, a restarted container) run one after the other; the second finds nothing to do.
MIGRATE_LOCK_KEY = 0x6F757463_6D696772 & 0x7FFFFFFFFFFFFFFF


def _config() -> Config:
    config = Config(str(SCRIPT_LOCATION / "alembic.ini"))
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    return config


def _one_at_a_time(conn: Connection) -> None:
    if conn.dialect.name == "postgresql":  # SQLite: BEGIN IMMEDIATE serializes writers already
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATE_LOCK_KEY})


def upgrade(engine: Engine, revision: str = "head") -> None:
    config = _config()
    with translated(), engine.begin() as conn:
        _one_at_a_time(conn)
        config.attributes["connection"] = conn
        command.upgrade(config, revision)


def downgrade(engine: Engine, revision: str) -> None:
    config = _config()
    with translated(), engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, revision)


def current_revision(engine: Engine) -> str | None:
    with translated(), engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def grant(engine: Engine, app_role: str, password: str | None = None) -> None:
    """Create the application role if missing and (re)apply its privileges, in one
    transaction, as the connected role (the owner of the ledger's tables)."""
    with translated(), engine.begin() as conn:
        _one_at_a_time(conn)
        privileges.apply_grants(conn, app_role, password)


def grant_script(engine: Engine, app_role: str) -> str:
    """What `grant` would run on this database, as a SQL script (no password)."""
    with translated(), engine.connect() as conn:
        return privileges.grant_script(app_role, privileges.current_schema(conn))

"""Schema migrations: Alembic scripts shipped as package data in `migrations/` beside this
module (loaded by path, never imported, so the core and its migrations form no import circle)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from ledger.persistence.errors import translated

SCRIPT_LOCATION = Path(__file__).parent / "migrations"


def _config() -> Config:
    config = Config(str(SCRIPT_LOCATION / "alembic.ini"))
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    config = _config()
    with translated(), engine.begin() as conn:
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


def head_revision() -> str | None:
    return ScriptDirectory.from_config(_config()).get_current_head()

"""Schema migrations (Alembic, in the top-level `migrations/` package) for both engines."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

import migrations
from ledger.persistence.errors import translated

SCRIPT_LOCATION = Path(migrations.__file__).parent


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

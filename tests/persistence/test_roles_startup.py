"""The startup check: the API and the reconciler (workers: tests/integration/test_roles_workers.py)
warn once, in one line, when they connect as a superuser or the owner of `events`, and stay
quiet as the application role or where the database has no roles."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from api.app import ROLE_CHECK, create_app
from cli.main import cli
from ledger.persistence.memory import MemoryStore
from ledger.privileges import ConnectedRole
from ledger.runtime.ledger import Ledger
from ledger.services import admin
from tests.factories import open_sql

SUPERUSER = ConnectedRole("postgres", superuser=True, owns_events=True)
OWNER = ConnectedRole("outcomes", superuser=False, owns_events=True)
APP = ConnectedRole("outcomes_app", superuser=False, owns_events=False)


def test_the_warning_names_the_role_the_danger_and_the_fix() -> None:
    assert APP.warning() is None
    for role, what in ((SUPERUSER, "a superuser"), (OWNER, "the owner of the events table")):
        warning = role.warning()
        assert warning is not None and "\n" not in warning
        assert f"'{role.name}', {what}" in warning
        assert "outcomes migrate --app-role NAME" in warning


def test_no_roles_no_warning(sqlite_database: str) -> None:
    assert admin.privilege_warning(Ledger(MemoryStore())) is None
    with open_sql(sqlite_database) as store:
        assert admin.connected_role(Ledger(store)) is None
        assert admin.privilege_warning(Ledger(store)) is None


def test_a_database_that_does_not_answer_is_no_warning() -> None:
    with open_sql("postgresql+psycopg://nobody@127.0.0.1:1/nothing") as store:
        assert admin.privilege_warning(Ledger(store)) is None


@pytest.mark.postgres
def test_superuser_warns_and_the_application_role_does_not(
    pg_database: str, pg_app_url: str
) -> None:
    with open_sql(pg_database) as owner, open_sql(pg_app_url) as app:
        assert admin.connected_role(Ledger(owner)) == SUPERUSER
        assert "a superuser" in (admin.privilege_warning(Ledger(owner)) or "")
        assert admin.privilege_warning(Ledger(app)) is None


# --- the adapters ---------------------------------------------------------------------------------


def warnings_of_the_api(url: str, caplog: pytest.LogCaptureFixture) -> list[str]:
    caplog.set_level(logging.WARNING, logger="api.app")
    with open_sql(url) as store, TestClient(create_app(Ledger(store), None)):
        for thread in threading.enumerate():
            if thread.name == ROLE_CHECK:
                thread.join(10)
    return [r.getMessage() for r in caplog.records if r.name == "api.app"]


@pytest.mark.postgres
def test_the_api_warns_once_as_superuser(
    pg_database: str, caplog: pytest.LogCaptureFixture
) -> None:
    warnings = warnings_of_the_api(pg_database, caplog)
    assert len(warnings) == 1 and "can disable the triggers" in warnings[0]


@pytest.mark.postgres
def test_the_api_is_quiet_as_the_application_role(
    pg_app_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert warnings_of_the_api(pg_app_url, caplog) == []


@pytest.fixture
def embedded_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """No broker URL: the reconciler dispatches through the embedded broker in the cwd."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OUTCOMES_BROKER_URL", raising=False)
    yield tmp_path


@pytest.mark.postgres
def test_the_reconciler_warns_as_superuser_and_not_as_the_application_role(
    pg_database: str, pg_app_url: str, embedded_home: Path
) -> None:
    runner = CliRunner()
    for url, warns in ((pg_database, True), (pg_app_url, False)):
        result = runner.invoke(
            cli, ["reconcile", "--once"], env={"OUTCOMES_DATABASE_URL": url}, catch_exceptions=False
        )
        assert result.exit_code == 0, result.output
        assert result.stderr.count("outcomes: WARNING: connected to the ledger as") == int(warns)

"""`outcomes secrets …`: a new key to put in OUTCOMES_SECRETS_KEY, the key ids loaded (never the
keys), and a check of a candidate value against a job's sealed secret that prints no value."""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner

from cli.main import cli
from ledger.decisions import Caller, JobRequest
from ledger.keyring import new_key_line, parse_keys
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services.submit import submit
from tests.plugins.cli import Invoke


def test_a_new_key_is_an_id_and_32_bytes(outcomes: Invoke) -> None:
    line = outcomes("secrets", "new-key", "--id", "k2026").output.strip()
    assert parse_keys(line, "printed").kids == ("k2026",)
    assert outcomes("secrets", "new-key", "--id", "bad id", ok=False).exit_code != 0


def test_keys_lists_ids_and_the_one_that_seals(
    outcomes: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = [new_key_line("new"), new_key_line("old")]
    monkeypatch.setenv("OUTCOMES_SECRETS_KEY", ",".join(lines))
    shown = outcomes("secrets", "keys", "--json")
    assert orjson.loads(shown.output) == {"keys": ["new", "old"], "seals_with": "new"}
    assert all(line.split(":")[1] not in shown.output for line in lines)


def test_check_tells_whether_a_value_is_the_recorded_secret(
    store: SqlStore, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OUTCOMES_DATABASE_URL", database_url)
    request = JobRequest("canary.crash", {"secret": "s3cret-value"})
    job_id = submit(Ledger(store), Caller("acme", "tok"), request).view.job_id
    runner = CliRunner()
    same = runner.invoke(cli, ["secrets", "check", job_id, "/secret"], input="s3cret-value\n")
    other = runner.invoke(cli, ["secrets", "check", job_id, "/secret"], input="guess\n")
    nowhere = runner.invoke(cli, ["secrets", "check", job_id, "/nope"], input="x")
    assert (same.exit_code, other.exit_code) == (0, 1), same.output
    assert "matches /secret" in same.output and "s3cret-value" not in same.output
    assert "does not match" in other.output
    assert nowhere.exit_code != 0 and "Error" not in nowhere.output

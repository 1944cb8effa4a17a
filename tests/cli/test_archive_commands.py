"""`outcomes archive`, `outcomes audit verify --archive DIR` and `outcomes jobs show ID
--archive DIR`: the files are read with no database at all (its URL points nowhere)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from cli.main import cli
from tests.factories import open_sql
from tests.plugins.archiving import ended_jobs, soon, token_events

NOWHERE = "postgresql+psycopg://nobody@127.0.0.1:1/none"  # no database answers there


def run(url: str, *args: str, code: int = 0) -> str:
    result = CliRunner().invoke(cli, list(args), env={"OUTCOMES_DATABASE_URL": url})
    assert result.exit_code == code, result.output
    return result.stdout


def test_archive_then_read_and_verify_the_files_without_a_database(
    tiny_url: str, tmp_path: Path
) -> None:
    with open_sql(tiny_url) as store:
        made = ended_jobs(store, 16)
    cutoff = soon().isoformat()
    done = orjson.loads(
        run(tiny_url, "archive", "--before", cutoff, "--to", str(tmp_path), "--json")
    )
    assert done["archive_id"] == 1 and done["counts"]["jobs"] > 0
    with open_sql(tiny_url) as store:
        gone = next(j for j in made if store.archived_job(j) is not None)
    shown = orjson.loads(run(NOWHERE, "jobs", "show", gone, "--archive", str(tmp_path), "--json"))
    assert shown["job"]["job_id"] == gone and shown["job"]["status"] == "succeeded"
    assert [e["type"] for e in shown["events"]][-1] == "work.succeeded"
    assert "ok: archive 1" in run(NOWHERE, "audit", "verify", "--archive", str(tmp_path))
    assert orjson.loads(run(NOWHERE, "audit", "verify", "--archive", str(tmp_path), "--json"))["ok"]
    # The database goes on from the archive.
    assert "verify" in run(tiny_url, "audit", "verify")
    # A changed manifest breaks the chain of SHA-256s and counts: exit 2, one line.
    manifest = tmp_path / "000001" / "manifest.json"
    manifest.write_bytes(manifest.read_bytes().replace(b'"jobs": ', b'"jobs": 1', 1))
    result = CliRunner().invoke(cli, ["audit", "verify", "--archive", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1].startswith("outcomes: archive 1 broken:")


def test_two_archives_of_the_ledgers_tail_then_both_verifies_pass(
    tiny_url: str, tmp_path: Path
) -> None:
    """Each archive takes the ledger up to its last event (the tokens' rows are kept): the
    events written between them go on from the first archive's last link."""
    with open_sql(tiny_url) as store:
        token_events(store, 2)
        ended_jobs(store, 16)  # 3 + 37 events: a clean cut at the last one
    archived = ["archive", "--before", soon().isoformat(), "--to", str(tmp_path), "--json"]
    assert orjson.loads(run(tiny_url, *archived))["archive_id"] == 1
    with open_sql(tiny_url) as store:
        ended_jobs(store, 16)
    archived[2] = soon().isoformat()
    assert orjson.loads(run(tiny_url, *archived))["archive_id"] == 2
    assert "verify" in run(tiny_url, "audit", "verify")
    checked = run(NOWHERE, "audit", "verify", "--archive", str(tmp_path))
    assert "ok: archive 1" in checked and "ok: archive 2" in checked
    assert orjson.loads(run(NOWHERE, "audit", "verify", "--archive", str(tmp_path), "--json"))["ok"]


def test_usage_errors_are_one_line(tmp_path: Path) -> None:
    for args in (
        ["archive", "--to", str(tmp_path)],
        ["archive", "--older-than", "ninety", "--to", str(tmp_path)],
        ["audit", "verify", "--archive", str(tmp_path), "--digest", __file__],
    ):
        result = CliRunner().invoke(cli, args, env={"OUTCOMES_DATABASE_URL": NOWHERE})
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith("outcomes: ") and result.stderr.count("\n") == 1
    missing = CliRunner().invoke(
        cli, ["jobs", "show", "0" * 8 + "-0000-0000-0000-" + "0" * 12, "--archive", str(tmp_path)]
    )
    assert missing.exit_code == 1 and "holds no archive" in missing.stderr


@pytest.mark.parametrize("age", ["90d", "12h", "30m", "45s"])
def test_ages_are_understood(age: str) -> None:
    from cli.archive_commands import cutoff

    assert cutoff(age, None) < soon()

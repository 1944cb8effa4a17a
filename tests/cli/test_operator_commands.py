"""Every operator and auditor command, through click's runner, on SQLite and Postgres."""

from __future__ import annotations

import orjson
import pytest
from pydantic import BaseModel

from ledger.decisions import Caller, JobRequest
from ledger.outcomes import Succeeded
from ledger.runtime.ledger import Ledger
from ledger.services.submit import submit
from ledger.tools import ToolContext, tool
from tests.factories import open_sql
from tests.plugins.cli import Invoke


class Note(BaseModel):
    text: str


@tool("clitest.note", spends=False)
def note(args: Note, ctx: ToolContext) -> Succeeded:
    return Succeeded(result={"text": args.text})


def accepted_job(database_url: str, account: str = "acme") -> str:
    store = open_sql(database_url)
    try:
        caller = Caller(account=account, token_id="tok")
        return submit(Ledger(store), caller, JobRequest("clitest.note", {"text": "hi"})).view.job_id
    finally:
        store.close()


def test_every_command_has_help(outcomes: Invoke) -> None:
    commands = [
        [],
        ["migrate"],
        ["serve"],
        ["worker"],
        ["reconcile"],
        ["brake"],
        ["brake", "pull"],
        ["brake", "release"],
        ["brake", "status"],
        ["jobs", "show"],
        ["jobs", "list"],
        ["jobs", "cancel"],
        ["audit", "events"],
        ["audit", "summary"],
        ["audit", "export"],
        ["audit", "digest"],
        ["audit", "verify"],
        ["tokens", "create"],
        ["tokens", "list"],
        ["tokens", "revoke"],
        ["demo"],
        ["rebuild"],
        ["status"],
    ]
    for command in commands:
        result = outcomes(*command, "--help")
        assert "Usage: " in result.output and len(result.output.splitlines()) > 3, command


def test_migrate_is_idempotent(outcomes: Invoke) -> None:
    result = outcomes("migrate", "--json")
    body = orjson.loads(result.stdout)
    assert body["from"] == body["to"] and body["to"] is not None


def test_brake_pull_status_release(outcomes: Invoke, database_url: str) -> None:
    accepted_job(database_url)
    pulled = orjson.loads(
        outcomes(
            "brake", "pull", "--scope", "tool:clitest.note", "--reason", "incident 7", "--json"
        ).stdout
    )
    status = orjson.loads(outcomes("brake", "status", "--json").stdout)
    assert [b["brake_id"] for b in status["brakes"]] == [pulled["brake_id"]]
    held = status["brakes"][0]
    assert (held["scope"], held["reason"], held["queued_jobs"]) == (
        "tool:clitest.note",
        "incident 7",
        1,
    )
    assert set(held) == {"brake_id", "scope", "reason", "operator", "pulled_at", "queued_jobs"}
    assert pulled["brake_id"] in outcomes("brake", "status").output
    outcomes("brake", "release", pulled["brake_id"], "--reason", "fixed")
    assert orjson.loads(outcomes("brake", "status", "--json").stdout) == {"brakes": []}
    again = outcomes("brake", "release", pulled["brake_id"], "--reason", "twice", ok=False)
    assert again.exit_code != 0 and "already released" in again.output


def test_a_brake_on_a_scope_naming_nothing_known_needs_force(
    outcomes: Invoke, database_url: str
) -> None:
    """Issue 47: `brake pull --scope tool:nope.x` exited 0, holding nothing."""
    accepted_job(database_url)  # clitest.note is known by its job
    for scope in ("tool:nope.x", "account:nobody-yet"):
        refused = outcomes("brake", "pull", "--scope", scope, "--reason", "r", ok=False)
        assert refused.exit_code != 0, refused.output
        assert "--force" in refused.output and scope in refused.output
    assert orjson.loads(outcomes("brake", "status", "--json").stdout)["brakes"] == []
    forced = outcomes("brake", "pull", "--scope", "tool:nope.x", "--reason", "r", "--force")
    assert forced.exit_code == 0
    known = outcomes("brake", "pull", "--scope", "tool:clitest.note", "--reason", "r")
    assert known.exit_code == 0
    assert len(orjson.loads(outcomes("brake", "status", "--json").stdout)["brakes"]) == 2


@pytest.mark.parametrize(
    "args",
    [
        ["brake", "pull", "--scope", "everything", "--reason", "x"],
        ["brake", "pull", "--scope", "global"],
        ["brake", "release", "no-such-brake", "--reason", "x"],
        ["jobs", "show", "not-a-uuid"],
        ["jobs", "show", "00000000-0000-0000-0000-000000000000"],
        ["tokens", "create", "--account", "Bad Account", "--role", "agent"],
        ["tokens", "create", "--account", "acme\n", "--role", "agent"],  # not a second 'acme'
        ["tokens", "create", "--account", "acme\u202e", "--role", "agent"],
        ["tokens", "create", "--account", "acme", "--role", "root"],
        ["tokens", "revoke", "no-such-token"],
        ["audit", "events", "--since", "yesterday-ish"],
        ["audit", "verify", "--digest", "/nonexistent/digest.json"],
    ],
)
def test_bad_input_is_one_line_and_non_zero(outcomes: Invoke, args: list[str]) -> None:
    result = outcomes(*args, ok=False)
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines, "an error must say why"


def test_jobs_show_and_list(outcomes: Invoke, database_url: str) -> None:
    job_id = accepted_job(database_url)
    other = accepted_job(database_url, account="globex")
    envelope = orjson.loads(outcomes("jobs", "show", job_id, "--json").stdout)
    assert (envelope["job_id"], envelope["status"], envelope["next_action"]) == (
        job_id,
        "queued",
        "wait",
    )
    assert envelope["error"] is None and envelope["attempts"] == 0
    assert "next_action" in outcomes("jobs", "show", job_id).output
    listed = orjson.loads(outcomes("jobs", "list", "--account", "acme", "--json").stdout)
    assert [item["job_id"] for item in listed["items"]] == [job_id]
    everything = orjson.loads(outcomes("jobs", "list", "--json").stdout)
    assert [item["job_id"] for item in everything["items"]] == [other, job_id]  # newest first
    page = orjson.loads(outcomes("jobs", "list", "--limit", "1", "--json").stdout)
    assert (page["count"], page["truncated"], everything["truncated"]) == (1, True, False)
    assert (page["items"][0]["job_id"], page["next_option"]) == (other, "--before")
    rest = orjson.loads(
        outcomes("jobs", "list", "--before", str(page["next_cursor"]), "--json").stdout
    )
    assert [i["job_id"] for i in page["items"] + rest["items"]] == [other, job_id]
    assert rest["truncated"] is False
    first = orjson.loads(
        outcomes("jobs", "list", "--oldest-first", "--limit", "1", "--json").stdout
    )
    assert (first["items"][0]["job_id"], first["next_option"]) == (job_id, "--after")
    later = orjson.loads(
        outcomes(
            "jobs", "list", "--oldest-first", "--after", str(first["next_cursor"]), "--json"
        ).stdout
    )
    assert [i["job_id"] for i in later["items"]] == [other]
    text = outcomes("jobs", "list", "--limit", "1")
    assert f"outcomes jobs list --before {page['next_cursor']}" in text.stderr


def test_tokens_create_list_revoke(outcomes: Invoke) -> None:
    created = orjson.loads(
        outcomes(
            "tokens",
            "create",
            "--account",
            "acme",
            "--role",
            "agent",
            "--tools",
            "clitest.note,c.d",
            "--allow-unknown-tools",
            "--json",
        ).stdout
    )
    assert set(created) == {"id", "token"} and created["token"].startswith("ol_")
    listed = orjson.loads(outcomes("tokens", "list", "--json").stdout)
    assert listed == {
        "tokens": [
            {
                "id": created["id"],
                "account": "acme",
                "role": "agent",
                "tools": ["c.d", "clitest.note"],
                "revoked": False,
            }
        ]
    }
    assert created["token"] not in outcomes("tokens", "list").output
    outcomes("tokens", "revoke", created["id"])
    assert orjson.loads(outcomes("tokens", "list", "--json").stdout)["tokens"][0]["revoked"] is True


def test_audit_events_summary_export_digest_verify(
    outcomes: Invoke, database_url: str, tmp_path: object
) -> None:
    from pathlib import Path

    folder = Path(str(tmp_path))
    job_id = accepted_job(database_url)
    lines = outcomes("audit", "events", "--format", "jsonl").stdout.splitlines()
    items = [orjson.loads(line) for line in lines]
    assert [i["type"] for i in items] == ["job.accepted"]
    assert items[0]["stream_id"] == f"job-{job_id}"
    csv_text = outcomes("audit", "events", "--format", "csv").stdout
    assert csv_text.splitlines()[0].startswith("position,stream_id")
    assert outcomes("audit", "events", "--type", "work.failed", "--format", "jsonl").stdout == ""
    outcomes("audit", "events", "--format", "csv", "--output", str(folder / "e.csv"))
    assert (folder / "e.csv").read_text() == csv_text
    summary = orjson.loads(outcomes("audit", "summary", "--json").stdout)
    assert (summary["jobs"], summary["by_status"], summary["by_account"]) == (
        1,
        {"queued": 1},
        {"acme": 1},
    )
    outcomes("audit", "export", "--output", str(folder / "all.jsonl"))
    exported = (folder / "all.jsonl").read_text().splitlines()
    assert len(exported) == 1 and orjson.loads(exported[0])["hash"] == items[0]["hash"]
    digest = folder / "digest.json"
    outcomes("audit", "digest", "--streams", "--output", str(digest))
    verified = orjson.loads(outcomes("audit", "verify", "--digest", str(digest), "--json").stdout)
    assert (verified["ok"], verified["events_checked"], verified["first_broken_position"]) == (
        True,
        1,
        None,
    )


def test_rebuild_replays_every_event(outcomes: Invoke, database_url: str) -> None:
    accepted_job(database_url)
    accepted_job(database_url)
    found = orjson.loads(outcomes("rebuild", "--json").stdout)
    assert (found["events_replayed"], found["streams"], found["resumed_after"]) == (2, 2, None)
    # The live projections wrote every row already: a rebuild of an honest ledger writes none.
    assert (found["rows_inserted"], found["rows_updated"], found["rows_deleted"]) == (0, 0, 0)
    assert (found["unfoldable"], found["unfoldable_total"]) == ([], 0)

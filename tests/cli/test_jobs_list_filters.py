"""`outcomes jobs list --status S --tool T --since WHEN` (issue 47), on SQLite and Postgres: each
filter narrows the list (together too, and page by page), and a value that cannot match
anything (an unknown status, a malformed tool name or moment) is a usage error, exit 2, that
says what it takes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

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


class Words(BaseModel):
    text: str


@tool("clifilter.first")
def first(args: Words, ctx: ToolContext) -> Succeeded:
    return Succeeded()


@tool("clifilter.second")
def second(args: Words, ctx: ToolContext) -> Succeeded:
    return Succeeded()


def submitted(database_url: str, tool_name: str, args: dict[str, object]) -> str:
    store = open_sql(database_url)
    try:
        caller = Caller(account="acme", token_id="tok")
        return submit(Ledger(store), caller, JobRequest(tool_name, args)).view.job_id
    finally:
        store.close()


def listed(outcomes: Invoke, *args: str) -> list[str]:
    body = orjson.loads(outcomes("jobs", "list", *args, "--json").stdout)
    return [item["job_id"] for item in body["items"]]


def test_status_tool_and_since_narrow_the_list(outcomes: Invoke, database_url: str) -> None:
    queued_first = submitted(database_url, "clifilter.first", {"text": "a"})
    refused_first = submitted(database_url, "clifilter.first", {})  # no text: refused
    queued_second = submitted(database_url, "clifilter.second", {"text": "b"})
    cancelled = submitted(database_url, "clifilter.second", {"text": "c"})
    outcomes("jobs", "cancel", cancelled)
    ours = {queued_first, refused_first, queued_second, cancelled}

    assert set(listed(outcomes, "--tool", "clifilter.first")) == {queued_first, refused_first}
    assert listed(outcomes, "--status", "refused", "--tool", "clifilter.first") == [refused_first]
    assert set(listed(outcomes, "--status", "queued")) & ours == {queued_first, queued_second}
    assert listed(outcomes, "--status", "declined", "--tool", "clifilter.second") == [cancelled]
    assert set(listed(outcomes, "--since", "1h")) >= ours
    assert listed(outcomes, "--since", "2999-01-01") == []
    past = (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    assert set(listed(outcomes, "--since", past, "--tool", "clifilter.second")) == {
        queued_second,
        cancelled,
    }

    # Page by page, the filters hold, and the next page's command keeps them.
    page = outcomes("jobs", "list", "--tool", "clifilter.second", "--limit", "1")
    assert "next page: outcomes jobs list --tool clifilter.second --before " in page.stderr
    one = orjson.loads(
        outcomes("jobs", "list", "--tool", "clifilter.second", "--limit", "1", "--json").stdout
    )
    rest = listed(outcomes, "--tool", "clifilter.second", "--before", str(one["next_cursor"]))
    assert [i["job_id"] for i in one["items"]] + rest == [cancelled, queued_second]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--status", "done"], "'done' is not one of"),
        (["--tool", "Not A Tool"], "is not a tool name"),
        (["--since", "yesterday"], "nor a time ago (e.g. 90s, 15m, 2h, 7d)"),
        (["--since", "5w"], "is neither an ISO 8601 date"),
    ],
)
def test_a_value_that_cannot_match_is_a_usage_error(
    outcomes: Invoke, args: list[str], says: str
) -> None:
    result = outcomes("jobs", "list", *args, ok=False)
    assert result.exit_code == 2, result.output
    assert says in result.stderr and "Traceback" not in result.output

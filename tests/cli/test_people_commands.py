"""`outcomes approvals …` and `outcomes turns show`, on SQLite and Postgres: the operator at the
database lists the parked calls, approves one (queued) and denies another (refused), a second
decision exits 1 with NOT_DECIDABLE and the first decision; a turn is told as the API tells it."""

from __future__ import annotations

import orjson

from ledger.decisions import Caller, JobRequest
from ledger.runtime.ledger import Ledger
from ledger.services.execute import Executor
from ledger.services.submit import submit
from tests.factories import open_sql
from tests.plugins.cli import Invoke
from tests.tools import APPROVED_CHARGE, ECHO, FAILING_CHARGE

AGENT = Caller(account="acme", token_id="tok-agent")


def submitted(database_url: str, *requests: JobRequest, run: bool = False) -> list[str]:
    store = open_sql(database_url)
    try:
        ids = [submit(Ledger(store), AGENT, request).view.job_id for request in requests]
        if run:
            for job_id in ids:
                Executor(Ledger(store), "w-1").execute(job_id)
        return ids
    finally:
        store.close()


def test_approvals_list_approve_deny(outcomes: Invoke, database_url: str) -> None:
    first, second = submitted(
        database_url,
        JobRequest(APPROVED_CHARGE, {"amount": 1}),
        JobRequest(APPROVED_CHARGE, {"amount": 2}),
    )
    listed = orjson.loads(outcomes("approvals", "list", "--json").stdout)
    assert [j["job_id"] for j in listed["items"]] == [first, second]
    assert first in outcomes("approvals", "list").output

    approved = outcomes("approvals", "approve", first, "--reason", "ok", "--operator", "olga")
    assert approved.output.strip() == f"job {first} approved: now queued"
    denied = orjson.loads(outcomes("approvals", "deny", second, "--reason", "no", "--json").stdout)
    assert (denied["status"], denied["error"]["cause"]) == ("refused", "approval_denied")

    again = outcomes("approvals", "deny", first, "--reason", "late", "--json", ok=False)
    assert again.exit_code == 1
    body = orjson.loads(again.stdout)
    assert (body["error"]["code"], body["error"]["cause"]) == ("NOT_DECIDABLE", "approved")
    assert body["job"]["approval"]["decided_by"] == "olga"
    assert orjson.loads(outcomes("approvals", "list", "--json").stdout)["count"] == 0


def test_turns_show(outcomes: Invoke, database_url: str) -> None:
    submitted(
        database_url,
        JobRequest(ECHO, {"text": "a"}, turn="cli-turn"),
        JobRequest(FAILING_CHARGE, {"amount": 1}, turn="cli-turn"),
        run=True,
    )
    told = orjson.loads(outcomes("turns", "show", "cli-turn", "--account", "acme", "--json").stdout)
    assert (told["complete"], told["all_succeeded"]) == (True, False)
    text = outcomes("turns", "show", "cli-turn", "--account", "acme").output
    assert text.splitlines()[0] == told["summary"]
    missing = outcomes("turns", "show", "cli-turn", "--account", "globex", ok=False)
    assert missing.exit_code != 0

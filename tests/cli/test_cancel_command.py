"""`outcomes jobs cancel`, on SQLite and Postgres: the operator at the database cancels a job no
worker has started (any account); a running one is left as it is, exit 1, and `--json` prints
NOT_CANCELLABLE with the job's envelope; a second cancel prints the first one's envelope."""

from __future__ import annotations

import orjson

from ledger.runtime.ledger import Ledger
from ledger.services.work import ClaimResult, claim
from tests.cli.test_operator_commands import accepted_job
from tests.factories import open_sql
from tests.plugins.cli import Invoke


def test_jobs_cancel(outcomes: Invoke, database_url: str) -> None:
    job_id = accepted_job(database_url, account="globex")
    done = outcomes("jobs", "cancel", job_id, "--reason", "incident 12", "--operator", "olga")
    assert done.output.strip() == (
        f"job {job_id} declined: Cancelled by operator olga at the command line before any "
        "worker started it: incident 12. Nothing ran."
    )
    shown = orjson.loads(outcomes("jobs", "show", job_id, "--json").stdout)
    again = orjson.loads(outcomes("jobs", "cancel", job_id, "--json").stdout)
    assert again == shown and (shown["status"], shown["next_action"]) == ("declined", "accept")

    running = accepted_job(database_url)
    store = open_sql(database_url)
    try:
        assert claim(Ledger(store), running, "w-1", 30).result is ClaimResult.CLAIMED
    finally:
        store.close()
    refused = outcomes("jobs", "cancel", running, "--json", ok=False)
    assert refused.exit_code == 1
    body = orjson.loads(refused.stdout)
    assert (body["error"]["code"], body["error"]["cause"], body["job"]["status"]) == (
        "NOT_CANCELLABLE",
        "running",
        "running",
    )
    assert refused.stderr.startswith("outcomes: NOT_CANCELLABLE: ")
    assert len(refused.stderr.splitlines()) == 1
    assert orjson.loads(outcomes("jobs", "show", running, "--json").stdout)["status"] == "running"

    unknown = outcomes("jobs", "cancel", "00000000-0000-4000-8000-000000000000", ok=False)
    assert (unknown.exit_code, unknown.stderr.startswith("outcomes: no job ")) == (1, True)
    bad = outcomes("jobs", "cancel", accepted_job(database_url), "--reason", "a\nb", ok=False)
    assert bad.exit_code == 1 and "U+000A" in bad.stderr

"""Jobs to cancel on a served ledger (MCP's, the client's), made in-process on the same ledger:
queued ones whose message a dispatcher that sends nothing confirmed (so no worker starts them
while the test runs), and one running (claimed here, under a long lease, so the reconciler
leaves it be)."""

from __future__ import annotations

from dataclasses import dataclass

import examples.seed_tools  # noqa: F401  (registers READ_ISSUE in this process: submit checks it)
from ledger.codes import Status
from ledger.decisions import Caller, JobRequest
from ledger.runtime.ledger import open_ledger
from ledger.services.submit import submit
from ledger.services.tokens import create as create_token
from ledger.services.work import ClaimResult, claim
from tests.factories import Recorder

READ_ISSUE = "tracker.read_issue"  # a seed tool every served ledger loads


@dataclass(frozen=True)
class ToCancel:
    queued: list[str]
    running: str
    auditor: str  # an auditor token of acme: may read, may not cancel


def jobs_to_cancel(database_url: str, queued: int = 1) -> ToCancel:
    ledger = open_ledger(database_url)
    try:
        caller = Caller(account="acme", token_id="tests")
        request = JobRequest(READ_ISSUE, {"issue_ref": "T-1"})
        views = [submit(ledger, caller, request, Recorder()).view for _ in range(queued + 1)]
        assert all(v.status is Status.QUEUED for v in views), views
        *waiting, running = [v.job_id for v in views]
        assert claim(ledger, running, "tests:cancel", 3600).result is ClaimResult.CLAIMED
        auditor = create_token(ledger, "acme", "auditor", None, actor="tests").token
    finally:
        ledger.close()
    return ToCancel(waiting, running, auditor)

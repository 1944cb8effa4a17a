"""`traceparent` on POST /v1/jobs: the decision continues the caller's trace and records it,
which the job's event pages show an auditor (and `outcomes jobs show`); a malformed header is
ignored (W3C), never an error. Over a real ledger on each backend."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from tests.plugins.api import Tokens, bearer
from tests.plugins.cli import Invoke
from tests.tools import ECHO
from tests.traces import CALLER_SPAN, CALLER_TRACE, TRACEPARENT, finished, recording


def submit(client: TestClient, token: str, headers: dict[str, str] | None = None) -> Any:
    sent = bearer(token) | (headers or {})
    response = client.post("/v1/jobs", json={"tool": ECHO, "args": {"text": "t"}}, headers=sent)
    assert response.status_code == 202, response.text
    return response.json()["job_id"]


def decision_trace(client: TestClient, token: str, job_id: str) -> Any:
    page = client.get(f"/v1/jobs/{job_id}/events", headers=bearer(token))
    assert page.status_code == 200, page.text
    first = page.json()["events"][0]
    assert first["type"] == "job.accepted"
    return first["data"].get("trace")


def test_the_decision_continues_the_callers_trace_and_its_event_page_shows_it(
    client: TestClient, tokens: Tokens, outcomes: Invoke
) -> None:
    with recording() as exporter:
        job_id = submit(client, tokens.acme, {"traceparent": TRACEPARENT, "tracestate": "k=v"})
        (decision,) = [s for s in finished(exporter) if s.name == "outcomes.submit"]
    assert (decision.trace_id, decision.parent_id) == (CALLER_TRACE, CALLER_SPAN)
    assert decision.attributes["outcomes.job_id"] == job_id
    shown = decision_trace(client, tokens.auditor, job_id)
    assert shown == {
        "trace_id": CALLER_TRACE,
        "parent_span_id": decision.span_id,
        "sampled": True,
        "state": "k=v",
    }
    # `outcomes jobs show`: the envelope, then the trace an auditor follows it by.
    assert f"trace_id: {CALLER_TRACE}" in outcomes("jobs", "show", job_id).output


def test_a_malformed_traceparent_is_ignored_never_an_error(
    client: TestClient, tokens: Tokens
) -> None:
    malformed = f"00-{CALLER_TRACE.upper()}-{CALLER_SPAN}-01"
    # Tracing off (the default): nothing to continue, nothing recorded.
    job_id = submit(client, tokens.acme, {"traceparent": malformed})
    assert decision_trace(client, tokens.acme, job_id) is None
    # Tracing on: a new trace begins at the decision.
    with recording() as exporter:
        job_id = submit(client, tokens.acme, {"traceparent": "not-a-trace"})
        (decision,) = [s for s in finished(exporter) if s.name == "outcomes.submit"]
    assert decision.parent_id is None and decision.trace_id != CALLER_TRACE
    assert decision_trace(client, tokens.acme, job_id)["trace_id"] == decision.trace_id

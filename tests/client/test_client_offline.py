"""The client's reading of answers no healthy server gives (a proxy's page, a 503 while the
ledger restarts), on httpx's mock transport: no server needed."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import orjson
import pytest
from outcomes_client import Client, ServiceUnavailable, UnexpectedResponse

JOB = "6b1f5f3e-0000-4000-8000-000000000001"
NOW = datetime.now(UTC).isoformat()
ENVELOPE = {
    "job_id": JOB,
    "account": "acme",
    "tool": "apitest.echo",
    "status": "succeeded",
    "terminal": True,
    "attempts": 1,
    "next_action": "accept",
    "result": {"text": "x"},
    "declined_reason": None,
    "partial": None,
    "error": None,
    "recorded_by": "worker",
    "created_at": NOW,
    "updated_at": NOW,
    "late_outcomes": [],
}
UNAVAILABLE = {
    "type": "urn:outcome-ledger:problem:source-unreliable",
    "title": "Source unreliable",
    "status": 503,
    "detail": "The ledger is unavailable.",
    "job_id": None,
    "error": {
        "code": "SOURCE_UNRELIABLE",
        "dependency": "ledger",
        "operation": "read",
        "retryable": True,
        "required_capability": None,
        "safe_fallback": None,
        "fix": "try again shortly",
        "message": "The ledger is unavailable.",
        "retry_after_s": None,
        "cause": None,
    },
}
PROBLEM = {"Content-Type": "application/problem+json"}


def test_wait_rides_out_503s_and_answers_the_envelope() -> None:
    answers = [
        httpx.Response(503, content=orjson.dumps(UNAVAILABLE), headers=PROBLEM),
        httpx.Response(503, content=orjson.dumps(UNAVAILABLE), headers=PROBLEM),
        httpx.Response(200, content=orjson.dumps(ENVELOPE)),
    ]
    transport = httpx.MockTransport(lambda request: answers.pop(0))
    with Client("http://ledger.test", "t", transport=transport) as client:
        job = client.wait(JOB, timeout_s=60)
    assert (job.status, job.next_action, answers) == ("succeeded", "accept", [])


def test_a_503_outside_wait_is_a_typed_error_that_says_wait() -> None:
    transport = httpx.MockTransport(
        lambda request: httpx.Response(503, content=orjson.dumps(UNAVAILABLE), headers=PROBLEM)
    )
    with (
        Client("http://ledger.test", "t", transport=transport) as client,
        pytest.raises(ServiceUnavailable) as down,
    ):
        client.get(JOB)
    assert (down.value.code, down.value.next_action) == ("SOURCE_UNRELIABLE", "wait")


def test_an_answer_outside_the_contract_is_unexpected_response() -> None:
    page = b"<html>502 Bad Gateway</html>"
    transport = httpx.MockTransport(lambda request: httpx.Response(502, content=page))
    with (
        Client("http://ledger.test", "t", transport=transport) as client,
        pytest.raises(UnexpectedResponse) as odd,
    ):
        client.get(JOB)
    assert odd.value.status == 502 and "Bad Gateway" in odd.value.body


def test_the_client_models_mirror_the_servers() -> None:
    """Drift guard: the client copies the contract's documents instead of importing them."""
    from outcomes_client import (
        CancelRefusal,
        Envelope,
        ErrorInfo,
        JobEvent,
        JobPage,
        PartialInfo,
        Problem,
        Waiting,
    )

    from api.models import JobEvent as ServerEvent
    from api.models import JobPage as ServerPage
    from api.problems import NotCancellableProblem
    from api.problems import Problem as ServerProblem
    from ledger.error_info import ErrorInfo as ServerError
    from ledger.job_view import JobEnvelope
    from ledger.job_view import PartialInfo as ServerPartial
    from ledger.job_view import Waiting as ServerWaiting

    pairs = [
        (Envelope, JobEnvelope),
        (ErrorInfo, ServerError),
        (PartialInfo, ServerPartial),
        (Waiting, ServerWaiting),
        (JobEvent, ServerEvent),
        (JobPage, ServerPage),
        (Problem, ServerProblem),
        (CancelRefusal, NotCancellableProblem),
    ]
    for ours, theirs in pairs:
        assert set(ours.model_fields) == set(theirs.model_fields), ours.__name__

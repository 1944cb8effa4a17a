"""One log line per decision, outcome, reconciler finding and brake change, on a ledger in
memory: the fields operators filter on, as JSON (the adapters' formatter), and never an
argument's value. And what the use cases tell the telemetry port (the metrics' histograms)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

import tests.tools  # noqa: F401  (the canary tools)
from ledger import telemetry
from ledger.decisions import Caller, JobRequest
from ledger.errors import ContentionError, OutcomeUnrecordedError, StorageUnavailableError
from ledger.reconcile_rules import ReconcilePolicy
from ledger.runtime.ledger import Ledger
from ledger.services import brakes, execute
from ledger.services.execute import Executor
from ledger.services.reconcile import reconcile_once
from ledger.services.submit import submit
from observability.logs import JsonFormatter, formatter
from tests.factories import Recorder
from tests.tools import RECONCILE_READS

AGENT = Caller(account="acme", token_id="tok-acme")
ONLY_DECLINE = Caller(account="acme", token_id="tok-narrow", tools=frozenset({"canary.decline"}))


class Told:
    """A telemetry that keeps what it is told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def appended(self, seconds: float, jobs: int) -> None:
        self.calls.append(("appended", jobs))

    def queue_waited(self, seconds: float) -> None:
        self.calls.append(("queue_waited", seconds >= 0))

    def outcome_recorded(self, tool: str, status: str, seconds: float) -> None:
        self.calls.append(("outcome_recorded", (tool, status)))

    def lease_renewal_failed(self) -> None:
        self.calls.append(("lease_renewal_failed", None))

    def outcome_unrecorded(self, tool: str) -> None:
        self.calls.append(("outcome_unrecorded", tool))

    def submit_rate_limited(self) -> None:
        self.calls.append(("submit_rate_limited", None))

    def claim_deferred(self) -> None:
        self.calls.append(("claim_deferred", None))

    def of(self, kind: str) -> list[Any]:
        return [value for name, value in self.calls if name == kind]


@pytest.fixture
def told() -> Iterator[Told]:
    kept = Told()
    previous = telemetry.install(kept)
    yield kept
    telemetry.install(previous)


def canary() -> str:
    return f"sk-live-{uuid.uuid4().hex}"


def lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    records = [r for r in caplog.records if r.name == "outcomes.events"]
    return [orjson.loads(JsonFormatter().format(r)) for r in records]


def test_one_json_line_per_decision_outcome_finding_and_brake_change(
    memory_ledger: Ledger, caplog: pytest.LogCaptureFixture, told: Told
) -> None:
    secret = canary()
    caplog.set_level(logging.INFO, logger="outcomes.events")
    worker = Executor(memory_ledger, "host-1:42", Recorder())

    crash = submit(memory_ledger, AGENT, JobRequest("canary.crash", {"secret": secret})).view
    decline = submit(memory_ledger, AGENT, JobRequest("canary.decline", {"secret": secret})).view
    worker.execute(crash.job_id)
    worker.execute(decline.job_id)
    denied = submit(memory_ledger, ONLY_DECLINE, JobRequest("canary.crash", {"secret": secret}))
    held = submit(memory_ledger, AGENT, JobRequest("canary.halt", {"secret": secret})).view
    brake = brakes.pull(memory_ledger, "tool:canary.halt", "runaway", "ops-ann")
    braked = submit(memory_ledger, AGENT, JobRequest("canary.halt", {"secret": secret})).view
    worker.execute(held.job_id)  # the brake holds it at the claim: work.halted
    brakes.release(memory_ledger, brake.brake_id, "understood", "ops-bob")
    silent = submit(memory_ledger, AGENT, JobRequest(RECONCILE_READS, {})).view
    later = datetime.now(UTC) + timedelta(hours=1)
    reconcile_once(memory_ledger, None, ReconcilePolicy(), at=later)

    found = lines(caplog)
    assert [line["event"] for line in found] == [
        *["decision"] * 2,
        *["outcome"] * 2,
        *["decision"] * 2,
        "brake",
        "decision",
        "outcome",
        "brake",
        "decision",
        "finding",
    ]
    by_job = {(line["event"], line.get("job_id")): line for line in found}
    assert by_job[("decision", crash.job_id)] == by_job[("decision", crash.job_id)] | {
        "tool": "canary.crash",
        "account": "acme",
        "status": "accepted",
    }
    assert "code" not in by_job[("decision", crash.job_id)]
    refused = by_job[("decision", denied.view.job_id)]
    assert (refused["status"], refused["code"]) == ("refused", "ACCESS_DENIED")
    assert by_job[("decision", braked.job_id)]["code"] == "BRAKE_ENGAGED"
    outcome = by_job[("outcome", crash.job_id)]
    assert {k: outcome[k] for k in ("status", "code", "worker", "attempt")} == {
        "status": "failed",
        "code": "TOOL_CRASHED",
        "worker": "host-1:42",
        "attempt": 1,
    }
    assert by_job[("outcome", decline.job_id)]["status"] == "declined"
    halted = by_job[("outcome", held.job_id)]
    assert (halted["status"], halted["code"]) == ("refused", "BRAKE_ENGAGED")
    finding = by_job[("finding", silent.job_id)]
    assert (finding["finding"], finding["cause"], finding["status"]) == (
        "outcome_missing",
        "never_started",
        "failed",
    )
    pulled, released = [line for line in found if line["event"] == "brake"]
    assert (pulled["status"], pulled["scope"], pulled["operator"]) == (
        "pulled",
        "tool:canary.halt",
        "ops-ann",
    )
    assert (released["status"], released["brake_id"], released["operator"]) == (
        "released",
        brake.brake_id,
        "ops-bob",
    )
    for line in found:
        assert {"ts", "level", "logger", "message", "event"} <= set(line)

    # Neither format ever carries an argument's value (the crash's text repeats it four times).
    records = [r for r in caplog.records]
    for fmt in ("json", "text"):
        written = "\n".join(formatter(fmt).format(r) for r in records)
        assert secret not in written and secret[8:] not in written

    # What the histograms were told: two outcomes and the halt by the worker, the silence by
    # the reconciler; two first starts (the halted job never started).
    assert sorted(told.of("outcome_recorded")) == [
        ("canary.crash", "failed"),
        ("canary.decline", "declined"),
        ("canary.halt", "refused"),
        (RECONCILE_READS, "failed"),
    ]
    assert told.of("queue_waited") == [True, True]
    assert sum(told.of("appended")) >= 6  # every grouped decision and outcome


def test_a_replayed_submit_is_not_a_second_decision(
    memory_ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="outcomes.events")
    request = JobRequest("canary.decline", {"secret": "x"}, idempotency_key="k-1")
    first = submit(memory_ledger, AGENT, request)
    again = submit(memory_ledger, AGENT, request)
    assert again.replayed and again.view.job_id == first.view.job_id
    assert [line["event"] for line in lines(caplog)] == ["decision"]


@pytest.mark.parametrize(
    "unwritten",
    [
        StorageUnavailableError("connection refused"),  # the database stayed away
        ContentionError("the outcome could not follow its stream"),  # the job kept moving
    ],
)
def test_failed_lease_renewals_and_unwritten_outcomes_are_told(
    memory_ledger: Ledger, told: Told, monkeypatch: pytest.MonkeyPatch, unwritten: Exception
) -> None:
    worker = Executor(memory_ledger, "host-1:42")
    worker._heartbeat(str(uuid.uuid4()), 1)  # no lease of this attempt: the renewal fails
    assert told.of("lease_renewal_failed") == [None]

    def database_away(*_: object, **__: object) -> None:
        raise unwritten

    monkeypatch.setattr(execute, "record_outcome", database_away)
    job = submit(memory_ledger, AGENT, JobRequest("canary.decline", {"secret": "x"})).view
    with pytest.raises(OutcomeUnrecordedError):
        worker.execute(job.job_id)
    assert told.of("outcome_unrecorded") == ["canary.decline"]

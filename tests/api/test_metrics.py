"""`GET /metrics` over a real ledger on SQLite and on Postgres: who may read it, and, after a
mixed workload, counters equal to the ledger's own counts by status and code."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

import tests.tools  # noqa: F401  (the canary tools)
from api.app import create_app
from ledger.codes import Status
from ledger.decisions import Caller, JobRequest
from ledger.events import job_stream
from ledger.persistence.appends import NO_STREAM
from ledger.persistence.sql_store import SqlStore
from ledger.queries import EventFilter
from ledger.reconcile_rules import ReconcilePolicy
from ledger.runtime.ledger import Ledger
from ledger.services import audit, brakes
from ledger.services.execute import Executor
from ledger.services.reconcile import reconcile_once
from ledger.services.submit import submit
from ledger.tools import tool_names
from observability.labels import OTHER
from tests.factories import accepted
from tests.plugins.api import RecordingDispatcher, Tokens, bearer
from tests.tools import ECHO, METERED, QUOTA, RECONCILE_READS

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
TERMINAL = [s.value for s in Status if s.terminal]


def scrape(client: TestClient, token: str | None) -> Samples:
    response = client.get("/metrics", headers=bearer(token) if token else {})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels`."""
    return sum(
        value
        for (found, keys), value in samples.items()
        if found == name and set(labels.items()) <= set(keys)
    )


def label_values(samples: Samples, name: str, label: str) -> set[str]:
    return {dict(keys)[label] for found, keys in samples if found == name and label in dict(keys)}


# --- who may read it --------------------------------------------------------------------------


def test_agents_get_403_no_token_401_deployment_readers_200(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    for token, status in [
        (None, 401),
        ("not-a-token", 401),
        (tokens.acme, 403),
        (tokens.acme_auditor, 403),  # one account's auditor: the counts are every account's
        (tokens.operator, 200),
        (tokens.auditor, 200),
    ]:
        response = client.get("/metrics", headers=bearer(token) if token else {})
        assert response.status_code == status, (token, response.text)
        if status != 200:
            assert response.headers["content-type"] == "application/problem+json"
            assert response.json()["error"]["code"] == "ACCESS_DENIED"


@pytest.fixture
def open_client(
    store: SqlStore, dispatcher: RecordingDispatcher, monkeypatch: pytest.MonkeyPatch
) -> Iterator[TestClient]:
    # The API reads its settings once, when it is made: the setting comes first.
    monkeypatch.setenv("OUTCOMES_METRICS_OPEN", "1")
    with TestClient(create_app(Ledger(store), dispatcher)) as test_client:
        yield test_client


def test_the_setting_is_read_when_the_app_is_made_not_at_each_scrape(
    app: FastAPI, tokens: Tokens, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OUTCOMES_METRICS_OPEN", "1")  # after the app was made: not read
    with TestClient(app) as client:
        assert client.get("/metrics").status_code == 401


def test_the_open_setting_needs_no_token(open_client: TestClient) -> None:
    assert scrape(open_client, None)[("outcomes_ledger_up", ())] == 1
    # A scraper that asks for OpenMetrics gets it.
    asked = {"Accept": "application/openmetrics-text; version=1.0.0"}
    response = open_client.get("/metrics", headers=asked)
    assert response.headers["content-type"].startswith("application/openmetrics-text")
    assert response.text.endswith("# EOF\n") and "\noutcomes_ledger_up 1" in response.text


# --- the counts -------------------------------------------------------------------------------


def workload(ledger: Ledger, tokens: Tokens) -> None:
    """Succeeded, failed, refused by a brake (at submit and at the claim), refused by
    permission, by quota and as unknown, and a reconciler finding (never started)."""
    agent = Caller(account="acme", token_id=tokens.acme_id)
    narrow = Caller(account="acme", token_id="tok-narrow", tools=frozenset({ECHO}))
    worker = Executor(ledger, "host-1:7")

    def run(caller: Caller, tool: str, args: dict[str, object]) -> str:
        view = submit(ledger, caller, JobRequest(tool, args)).view
        if view.accepted:
            worker.execute(view.job_id)
        return view.job_id

    for text in ("a", "b", "c"):
        run(agent, ECHO, {"text": text})  # succeeded
    run(agent, "canary.crash", {"secret": "s3cr3t-value"})  # failed: TOOL_CRASHED
    run(narrow, METERED, {"text": "x"})  # refused: ACCESS_DENIED
    run(agent, "nowhere.tool", {})  # refused: CAPABILITY_UNAVAILABLE
    for _ in range(QUOTA + 1):
        run(agent, METERED, {"text": "q"})  # the last one: refused, QUOTA_EXCEEDED
    brake = brakes.pull(ledger, f"tool:{ECHO}", "runaway", "ops")
    run(agent, ECHO, {"text": "held"})  # refused at submit: BRAKE_ENGAGED
    brakes.release(ledger, brake.brake_id, "fine", "ops")
    held = submit(ledger, agent, JobRequest(ECHO, {"text": "late"})).view
    brakes.pull(ledger, "account:acme", "audit", "ops")  # stays pulled
    worker.execute(held.job_id)  # halted at the claim: an outcome, refused
    globex = Caller(account="globex", token_id="tok-g")
    rejected = submit(ledger, globex, JobRequest(RECONCILE_READS, {})).view
    submit(ledger, globex, JobRequest(RECONCILE_READS, {}))
    # A worker could not take the first one's delivery: sent again, on that evidence.
    worker.report_rejected(rejected.job_id, RuntimeError("could not claim"))
    policy = ReconcilePolicy(relay_after_s=3600)
    reconcile_once(ledger, None, policy, at=datetime.now(UTC) + timedelta(minutes=1))
    # Past both start deadlines (600 s): closed as never started.
    reconcile_once(ledger, None, policy, at=datetime.now(UTC) + timedelta(hours=1))


def test_counters_equal_the_ledgers_counts_by_status_and_code(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    ledger = Ledger(store)
    before = scrape(client, tokens.operator)  # of an empty ledger
    assert total(before, "outcomes_decisions_total") == 0
    workload(ledger, tokens)
    # A scrape reads the sequencer's head as it stands and never ticks (no reconciler runs
    # here to tick): ledger order is caught up first, so the position is the whole workload's.
    store.sequence()
    samples = scrape(client, tokens.operator)
    summary = audit.summary(ledger, None)

    # Decisions: one per job; by code, exactly the recorded refusals.
    decided = total(samples, "outcomes_decisions_total")
    assert decided == summary.jobs == 13
    events = audit.events(ledger, EventFilter(limit=1000))
    refusals = Counter(str(e.code) for e in events if e.type == "job.refused")
    accepted = sum(1 for e in events if e.type == "job.accepted")
    assert total(samples, "outcomes_decisions_total", status="accepted") == accepted == 9
    for code in label_values(samples, "outcomes_decisions_total", "code") - {""}:
        assert (
            total(samples, "outcomes_decisions_total", status="refused", code=code)
            == (refusals[code])
        ), code
    assert sum(refusals.values()) == 4

    # By status and by code, decisions and outcomes together are the summary's counts.
    for status in TERMINAL:
        refused = total(samples, "outcomes_decisions_total", status="refused")
        expected = summary.by_status.get(status, 0)
        counted = total(samples, "outcomes_outcomes_total", status=status)
        assert counted + (refused if status == "refused" else 0) == expected, status
    for status in ("queued", "running", "retrying"):
        counted = total(samples, "outcomes_jobs_open", status=status)
        assert counted == summary.by_status.get(status, 0), status
    codes = set(summary.by_code) | label_values(samples, "outcomes_outcomes_total", "code")
    for code in codes - {""}:
        counted = total(samples, "outcomes_decisions_total", code=code) + total(
            samples, "outcomes_outcomes_total", code=code
        )
        assert counted == summary.by_code.get(code, 0), code

    # And the workload's own tallies, named.
    assert total(samples, "outcomes_outcomes_total", status="succeeded", tool=ECHO) == 3
    assert total(samples, "outcomes_outcomes_total", status="succeeded", tool=METERED) == QUOTA
    assert total(samples, "outcomes_outcomes_total", code="TOOL_CRASHED") == 1
    assert total(samples, "outcomes_outcomes_total", status="refused", code="BRAKE_ENGAGED") == 1
    assert total(samples, "outcomes_outcomes_total", code="OUTCOME_MISSING") == 2
    for code in ("ACCESS_DENIED", "CAPABILITY_UNAVAILABLE", "QUOTA_EXCEEDED", "BRAKE_ENGAGED"):
        assert total(samples, "outcomes_decisions_total", status="refused", code=code) == 1

    # The reconciler's findings, counted from its events.
    findings = {
        kind: total(samples, "outcomes_reconciler_findings_total", finding=kind, cause=cause)
        for kind, cause in [
            ("redispatched", "worker_rejected"),
            ("outcome_missing", "never_started"),
        ]
    }
    assert findings == {"redispatched": 1, "outcome_missing": 2}
    assert total(samples, "outcomes_redispatches_total", evidence="worker_rejected") == 1
    assert total(samples, "outcomes_redispatches_total") == 1
    assert samples[("outcomes_dispatch_unconfirmed", ())] == 0  # nothing waits any more
    assert samples[("outcomes_queue_oldest_wait_seconds", ())] == 0
    assert samples[("outcomes_brakes_active", (("scope", "account:acme"),))] == 1
    assert samples[("outcomes_ledger_position", ())] == store.last_position()
    assert samples[("outcomes_ledger_up", ())] == 1

    # A second scrape agrees.
    again = scrape(client, tokens.auditor)
    moving = ("outcomes_append", "outcomes_sequencer")  # timings, and the lag as it stood
    for key, value in samples.items():
        if key[0].startswith("outcomes_") and not key[0].startswith(moving):
            assert again[key] == value, key
    if store.dialect == "postgresql":  # ledger order was caught up before the first scrape
        assert again[("outcomes_sequencer_waiting_events", ())] == 0
        assert again[("outcomes_sequencer_lag_seconds", ())] == 0


def test_process_histograms_count_what_this_process_recorded(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    ledger = Ledger(store)
    first = scrape(client, tokens.operator)
    worker = Executor(ledger, "host-1:7")
    for text in ("a", "b"):
        job = submit(ledger, Caller("acme", tokens.acme_id), JobRequest(ECHO, {"text": text}))
        worker.execute(job.view.job_id)
    samples = scrape(client, tokens.operator)
    name = "outcomes_submit_to_outcome_seconds_count"
    labels = {"tool": ECHO, "status": "succeeded"}
    assert total(samples, name, **labels) - total(first, name, **labels) == 2
    waited = "outcomes_queue_wait_seconds_count"
    assert total(samples, waited) - total(first, waited) == 2
    appended = "outcomes_append_seconds_count"
    assert total(samples, appended) - total(first, appended) >= 4  # 2 decisions, 2 outcomes


# --- bounded labels ---------------------------------------------------------------------------


def test_two_hundred_unknown_tool_names_mint_no_series(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    """Any agent may send any tool name: each is a refused decision, and none a series of its
    own, in the ledger's counts or in this process's metrics (a worker without the tools of
    the jobs it takes observes their outcomes under `_other` as well)."""
    before = scrape(client, tokens.operator)
    unknown = [f"nowhere.tool_{i}" if i % 2 else f"Any Name #{i}!" for i in range(200)]
    for name in unknown:
        response = client.post(
            "/v1/jobs", json={"tool": name, "args": {}}, headers=bearer(tokens.acme)
        )
        assert response.status_code == 422, response.text
        assert response.json()["error"]["code"] == "CAPABILITY_UNAVAILABLE"
    ledger = Ledger(store)
    worker = Executor(ledger, "host-1:7")
    gone = [f"gone.tool_{i}" for i in range(200)]
    for number, name in enumerate(gone):
        job_id = f"00000000-0000-4000-8000-{number:012d}"
        store.append(job_stream(job_id), [accepted(tool=name)], NO_STREAM)
        worker.execute(job_id)
    samples = scrape(client, tokens.operator)

    shown = {value for (_, keys) in samples for key, value in keys if key == "tool"}
    assert shown <= {OTHER, *tool_names()}
    assert total(samples, "outcomes_decisions_total", tool=OTHER, status="refused") == 200
    assert total(samples, "outcomes_outcomes_total", tool=OTHER, status="failed") == 200
    minted = {key for key in samples if key not in before}
    assert len(minted) < 40, sorted(minted)  # of 400 names, a handful of series (histograms)
    for family in ("outcomes_decisions_total", "outcomes_outcomes_total"):
        assert len([key for key in samples if key[0] == family]) <= 4, family

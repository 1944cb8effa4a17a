"""A verification is `outcomes audit verify`'s work, never the API's: the command records its
result, and `/metrics`, `outcomes status` (human and --json) and the console's audit page show
the last one recorded, on SQLite and Postgres. Opening the console's audit page starts
nothing: no record appears until the command runs."""

from __future__ import annotations

from datetime import datetime

import orjson
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from cli.errors import EXIT_PROBLEM
from ledger.errors import StorageError
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services import audit, verifications, verify_passes
from tests.factories import accepted, fresh_job_stream
from tests.plugins.api import Tokens, bearer
from tests.plugins.cli import Invoke
from tests.plugins.tampering import tamper_set

GAUGES = (
    "outcomes_last_verified_position",
    "outcomes_last_verified_timestamp_seconds",
    "outcomes_last_verification_ok",
)


def gauges(client: TestClient, token: str) -> dict[str, float]:
    response = client.get("/metrics", headers=bearer(token))
    assert response.status_code == 200, response.text
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
        if sample.name in GAUGES
    }


def status(outcomes: Invoke, *args: str) -> str:
    # The API is not up here (exit 3): the ledger's part is printed all the same.
    done = outcomes("status", "--timeout", "0.2", *args, ok=False)
    assert done.exit_code in (0, 3), done.output
    return done.stdout


def console_audit(client: TestClient, token: str) -> str:
    signed = client.post("/console/sign-in", data={"token": token}, follow_redirects=False)
    assert signed.status_code == 303
    page = client.get("/console/audit")
    assert page.status_code == 200
    return page.text


def test_a_recorded_verification_shows_everywhere_and_nothing_else_verifies(
    client: TestClient,
    tokens: Tokens,
    store: SqlStore,
    outcomes: Invoke,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for _ in range(3):
        store.append(fresh_job_stream(), [accepted()], 0)
    ledger = Ledger(store)

    # Before any verification: nothing to show, and the pages and a scrape verify nothing.
    started: list[object] = []
    with monkeypatch.context() as patched:
        patched.setattr(verify_passes, "verify_passes", lambda *a, **k: started.append(a))
        patched.setattr(audit, "verify_passes", lambda *a, **k: started.append(a))
        assert "No verification recorded yet" in console_audit(client, tokens.auditor)
        assert "No verification recorded yet" in client.get("/console/audit").text
        assert gauges(client, tokens.operator) == {}
    assert started == []
    assert verifications.last(ledger) is None
    assert orjson.loads(status(outcomes, "--json"))["last_verification"] is None
    assert "verified:   never" in status(outcomes)

    outcomes("audit", "verify", "--by", "olga")
    kept = verifications.last(ledger)
    assert kept is not None and kept.ok and kept.verified_by == "olga"
    position = store.last_position()
    assert (kept.first_position, kept.last_position, kept.events, kept.streams) == (
        1,
        position,
        position,
        position,  # the tokens' streams and the jobs', one event each
    )
    assert (kept.problems, kept.first_problem, kept.with_digest) == (0, None, False)

    assert gauges(client, tokens.operator) == {
        "outcomes_last_verified_position": position,
        "outcomes_last_verified_timestamp_seconds": kept.finished_at.timestamp(),
        "outcomes_last_verification_ok": 1.0,
    }
    shown = orjson.loads(status(outcomes, "--json"))["last_verification"]
    assert shown == kept.to_json()
    assert "verified:   ok; up to position" in status(outcomes)
    page = client.get("/console/audit").text
    assert f"✓ Intact: {position} events in {position} streams" in page and "olga" in page
    assert datetime.fromisoformat(shown["finished_at"]) == kept.finished_at

    # A verification that fails records its first problem's line; the newest record wins.
    tamper_set(database_url, 2, actor="worker:mallory")
    failed = outcomes("audit", "verify", ok=False)
    assert failed.exit_code == EXIT_PROBLEM
    latest = verifications.last(ledger)
    assert latest is not None and not latest.ok and latest.problems >= 1
    assert latest.first_problem is not None and latest.first_problem.startswith(
        "ledger broken at position 2: "
    )
    assert "@" in latest.verified_by  # user@host, without --by
    assert gauges(client, tokens.operator)["outcomes_last_verification_ok"] == 0.0
    assert orjson.loads(status(outcomes, "--json"))["last_verification"]["ok"] is False
    page = client.get("/console/audit").text
    assert "✗ Not intact" in page and "ledger broken at position 2" in page


@pytest.mark.parametrize("by", ["--digest", None])
def test_the_record_says_whether_a_digest_was_checked(
    store: SqlStore, outcomes: Invoke, tmp_path: object, by: str | None
) -> None:
    store.append(fresh_job_stream(), [accepted()], 0)
    args: list[str] = []
    if by is not None:
        saved = f"{tmp_path}/digest.json"
        outcomes("audit", "digest", "--streams", "--output", saved)
        args = [by, saved]
    outcomes("audit", "verify", *args)
    kept = verifications.last(Ledger(store))
    assert kept is not None and kept.with_digest is (by is not None)


def test_a_verifier_that_may_only_read_still_gets_its_answer(
    store: SqlStore, outcomes: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An auditor's database role may be read-only: the verification stands, unrecorded."""
    store.append(fresh_job_stream(), [accepted()], 0)

    def refused(*args: object, **kwargs: object) -> None:
        raise StorageError("permission denied for table verifications")

    monkeypatch.setattr(verifications, "record", refused)
    done = outcomes("audit", "verify")
    assert "the result was not recorded: permission denied" in done.stderr
    assert "events in 1 streams verify" in done.stdout


def test_a_sample_is_shown_as_a_sample_and_checks_no_range(
    client: TestClient, tokens: Tokens, store: SqlStore, outcomes: Invoke, tmp_path: object
) -> None:
    """`--sample` proves N events: the record says so; the verified position and its age stay
    the last whole-range run's, while a sample's problem would still show as not ok."""
    for _ in range(4):
        store.append(fresh_job_stream(), [accepted()], 0)
    ledger = Ledger(store)
    assert gauges(client, tokens.operator) == {}
    outcomes("audit", "verify", "--sample", "2", "--seed", "1")
    sampled = verifications.last(ledger)
    assert sampled is not None and sampled.scope == "sample" and not sampled.covers_range
    assert verifications.last(ledger, samples=False) is None
    # Only samples so far: no range checked, so no position or age to alert on.
    assert gauges(client, tokens.operator) == {"outcomes_last_verification_ok": 1.0}
    assert "a sample of" in status(outcomes) and "up to position" not in status(outcomes)
    page = console_audit(client, tokens.auditor)
    assert "No problem in a sample" in page and "Intact" not in page

    outcomes("audit", "verify")
    full = verifications.last(ledger)
    assert full is not None and full.scope == "full"
    outcomes("audit", "digest", "--output", f"{tmp_path}/head.json")
    store.append(fresh_job_stream(), [accepted()], 0)
    outcomes("audit", "verify", "--since", f"{tmp_path}/head.json")
    since = verifications.last(ledger)
    assert since is not None and since.scope == "since" and since.covers_range
    assert "(the events since a tree head)" in status(outcomes)
    outcomes("audit", "verify", "--sample", "3")
    assert orjson.loads(status(outcomes, "--json"))["last_verification"]["scope"] == "sample"
    assert gauges(client, tokens.operator) == {
        "outcomes_last_verified_position": since.last_position,
        "outcomes_last_verified_timestamp_seconds": since.finished_at.timestamp(),
        "outcomes_last_verification_ok": 1.0,
    }
    page = client.get("/console/audit").text
    assert "a random sample, each event proved against the tree head" in page

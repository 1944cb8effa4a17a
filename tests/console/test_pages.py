"""The console in-process (FastAPI's TestClient over a memory ledger): sign-in and its refusals,
the session cookie, every page's content and headers, account scoping, read-only forms, and
the canary: no page, fragment or export holds an argument value or a token."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from ledger.persistence.memory import MemoryStore
from ledger.runtime.ledger import Ledger
from ledger.services import tokens
from tests.console.ledger_rows import CANARY, Seeded, seed

PAGES = (
    "/console/jobs",
    "/console/jobs?status=failed",
    "/console/jobs?code=OUTCOME_MISSING&tool=debug.spend_slowly",
    "/console/jobs/rows",
    "/console/silence",
    "/console/silence?window=30d",
    "/console/brakes",
    "/console/audit",
    "/console/audit/export.jsonl",
)


@pytest.fixture
def ledger() -> Ledger:
    return Ledger(MemoryStore())


@pytest.fixture
def seeded(ledger: Ledger) -> Seeded:
    return seed(ledger)


@pytest.fixture
def client(ledger: Ledger, seeded: Seeded) -> Iterator[TestClient]:
    with TestClient(create_app(ledger, None), follow_redirects=False) as test_client:
        yield test_client


def sign_in(client: TestClient, token: str) -> None:
    answer = client.post("/console/sign-in", data={"token": token})
    assert answer.status_code == 303 and answer.headers["location"] == "/console/jobs"


def every_page(client: TestClient, seeded: Seeded) -> dict[str, str]:
    jobs = [f"/console/jobs/{j}" for j in (seeded.failed, seeded.lost, seeded.late, seeded.halted)]
    found = {}
    for path in (*PAGES, *jobs):
        answer = client.get(path)
        assert answer.status_code == 200, (path, answer.text[:500])
        found[path] = answer.text
    return found


def test_every_page_asks_a_stranger_to_sign_in(client: TestClient, seeded: Seeded) -> None:
    for path in (*PAGES, f"/console/jobs/{seeded.failed}", "/console"):
        answer = client.get(path)
        assert answer.status_code == 303, path
        assert answer.headers["location"] in ("/console/sign-in", "/console/jobs")
    page = client.get("/console/sign-in")
    assert page.status_code == 200 and '<label for="token">' in page.text
    assert page.headers["content-security-policy"].startswith("default-src 'none'")


def test_an_agent_token_gets_a_clear_refusal_and_no_session(
    client: TestClient, seeded: Seeded
) -> None:
    answer = client.post("/console/sign-in", data={"token": seeded.agent})
    assert answer.status_code == 403
    assert "the console is for operators and auditors" in answer.text
    assert "set-cookie" not in answer.headers and seeded.agent not in answer.text
    assert client.get("/console/jobs").status_code == 303


def test_a_wrong_token_is_refused_without_being_echoed(client: TestClient) -> None:
    answer = client.post("/console/sign-in", data={"token": "ol_not-a-token-at-all"})
    assert answer.status_code == 401 and "not valid" in answer.text
    assert "ol_not-a-token-at-all" not in answer.text
    assert client.post("/console/sign-in", content=b"token=" + b"x" * 5000).status_code == 400


def test_the_session_cookie_holds_no_token(client: TestClient, seeded: Seeded) -> None:
    answer = client.post("/console/sign-in", data={"token": seeded.operator})
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/console" in cookie
    assert seeded.operator not in cookie and seeded.operator not in answer.headers["location"]


def test_no_page_shows_an_argument_value_or_a_token(client: TestClient, seeded: Seeded) -> None:
    secrets = (CANARY, seeded.operator, seeded.auditor, seeded.agent, seeded.acme_operator)
    for token in (seeded.operator, seeded.auditor):
        sign_in(client, token)
        for path, html in every_page(client, seeded).items():
            assert not [s[:12] for s in secrets if s in html], path
        job = client.get(f"/console/jobs/{seeded.failed}").text
        # Recorded before secrets were declared (no secret_paths): the keys stay, values go.
        assert "api_key" in job and "(redacted)" in job


def test_hashes_are_for_auditors(client: TestClient, seeded: Seeded) -> None:
    sign_in(client, seeded.operator)
    assert "hash <code>" not in client.get(f"/console/jobs/{seeded.failed}").text
    assert '"hash"' not in client.get("/console/audit/export.jsonl").text
    sign_in(client, seeded.auditor)
    page = client.get(f"/console/jobs/{seeded.failed}").text
    assert "hash <code>" in page and page.count("✓ link verifies") == 5
    assert '"hash"' in client.get("/console/audit/export.jsonl").text


def test_the_timeline_of_a_retried_failure(client: TestClient, seeded: Seeded) -> None:
    sign_in(client, seeded.operator)
    page = client.get(f"/console/jobs/{seeded.failed}").text
    for said in (
        "Attempt 1 started",
        "worker host:101",
        "Attempt 1 failed, retry scheduled",
        "fingerprint tracker-config-v1",
        "Attempt 2 started",
        "Outcome: failed",
    ):
        assert said in page, said
    late = client.get(f"/console/jobs/{seeded.late}").text
    assert "Reconciler: outcome missing (worker_lost)" in late
    assert "Late outcome of attempt 1" in late
    halted = client.get(f"/console/jobs/{seeded.halted}").text
    assert "Attempt 1 halted" in halted and "cards render blank" in halted


def test_jobs_list_counts_and_filters(client: TestClient, seeded: Seeded) -> None:
    sign_in(client, seeded.operator)
    page = client.get("/console/jobs").text
    assert page.count('href="/console/jobs/') == 5  # every job, both accounts
    assert "All <strong>5</strong>" in page
    failed = client.get("/console/jobs?status=failed").text
    assert seeded.failed in failed and seeded.halted not in failed
    rows = client.get("/console/jobs/rows?code=BRAKE_ENGAGED").json()
    assert seeded.halted in rows["rows"] and seeded.failed not in rows["rows"]
    for bad in ("status=bogus", "code=nope", "since=yesterday", "tool=%3Cscript%3E", "before=-1"):
        answer = client.get(f"/console/jobs?{bad}")
        assert answer.status_code == 400 and "<script>" not in answer.text, bad


def test_an_account_scoped_operator_sees_its_account_only(
    client: TestClient, seeded: Seeded
) -> None:
    sign_in(client, seeded.acme_operator)
    page = client.get("/console/jobs").text
    assert page.count('href="/console/jobs/') == 4 and "globex" not in page
    assert client.get("/console/jobs?account=globex").text.count('href="/console/jobs/') == 4


def test_silence_and_brakes(client: TestClient, seeded: Seeded) -> None:
    sign_in(client, seeded.operator)
    silence = client.get("/console/silence").text
    assert "worker_lost: <strong>2</strong>" in silence and seeded.lost in silence
    assert seeded.late not in silence.split("verify_at_source")[-1]  # its tool does not spend
    brakes = client.get("/console/brakes").text
    active, released = brakes.split("<h2>Released</h2>")
    assert "cards render blank" in active and seeded.brake_id in active
    assert "bounce storm" in released and "provider fixed" in released
    assert "outcomes brake pull --scope" in brakes


def test_a_revoked_token_ends_its_session(
    client: TestClient, ledger: Ledger, seeded: Seeded
) -> None:
    sign_in(client, seeded.operator)
    assert client.get("/console/brakes").status_code == 200
    found = tokens.authenticate(ledger, seeded.operator)
    tokens.revoke(ledger, found.token_id, "tests")
    assert client.get("/console/brakes").headers["location"] == "/console/sign-in"


def test_signing_out_is_a_post_and_ends_the_session(client: TestClient, seeded: Seeded) -> None:
    sign_in(client, seeded.auditor)
    assert client.get("/console/sign-out").status_code == 405
    assert client.get("/console/audit").status_code == 200
    answer = client.post("/console/sign-out")
    assert answer.status_code == 303 and 'outcomes_console=""' in answer.headers["set-cookie"]
    assert client.get("/console/audit").status_code == 303


def test_an_unknown_job_and_the_openapi_document(client: TestClient, seeded: Seeded) -> None:
    sign_in(client, seeded.operator)
    assert client.get("/console/jobs/not-a-job").status_code == 404
    assert "/console" not in str(client.get("/openapi.json").json()["paths"])


def test_a_jobs_facts_are_labelled_in_sentence_case_and_flags_say_yes_or_no(
    client: TestClient, seeded: Seeded
) -> None:
    """Issue 47: the job page's facts mixed `Tool` with `ledger position`, and showed a
    flag as Python's `False`."""
    import re

    sign_in(client, seeded.operator)
    for job_id in (seeded.failed, seeded.lost, seeded.late, seeded.halted):
        page = client.get(f"/console/jobs/{job_id}").text
        facts = page.split('<dl class="facts">', 1)[1].split("</dl>", 1)[0]
        labels = re.findall(r"<dt>(.*?)</dt>", facts)
        assert "Ledger position" in labels and "Spends" in labels, labels
        assert all(label[0].isupper() for label in labels), labels
        assert re.search(r"<dt>Spends</dt><dd>(yes|no)</dd>", facts), facts
        assert not re.search(r">\s*(True|False|None)\s*<", page)


def test_staff_of_one_account_see_their_accounts_audit_figures_only(
    client: TestClient, ledger: Ledger, seeded: Seeded
) -> None:
    """Issue 47 (Low): one-account staff read the ledger-wide head, hash and a verification's
    counts and problems (every account's) on the audit page. They now see their account's
    newest change and the verification's verdict; staff of every account still see it all."""
    import re
    from datetime import UTC, datetime

    from ledger.queries import JobFilter
    from ledger.services import audit, jobs
    from ledger.verification_record import VerificationRecord

    moment = datetime.now(UTC)
    broken = VerificationRecord(
        started_at=moment,
        finished_at=moment,
        first_position=1,
        last_position=987,
        events=987,
        streams=123,
        ok=False,
        problems=4,
        first_problem="stream job-globex-secret-plan: hash does not verify",
        verified_by="olga@host",
        with_digest=False,
    )
    with ledger.store.transaction() as tx:
        tx.record_verification(broken)
    acme_auditor = tokens.create(ledger, "acme", "auditor", None, "tests").token
    last_acme = jobs.search(ledger, JobFilter(account="acme", limit=1, newest_first=True))
    head_position = audit.head(ledger).position

    for token in (acme_auditor, seeded.acme_operator):
        sign_in(client, token)
        page = client.get("/console/audit").text
        assert "Account acme" in page and f"position {last_acme[0].ledger_position}," in page
        assert "Not intact" in page
        for ledger_wide in ("globex", "987", "123", "4 problems", "Ledger-wide hash"):
            assert ledger_wide not in page, ledger_wide
        assert not re.search(r"<dt>Last position</dt>", page)
    sign_in(client, seeded.auditor)
    page = client.get("/console/audit").text
    assert f"<dt>Last position</dt><dd>{head_position}</dd>" in page
    assert "4 problems; the first: stream job-globex-secret-plan" in page
    assert "1 to 987" in page

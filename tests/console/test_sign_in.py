"""The console's forms against other sites and odd bodies: a sign-in posted from another site's
page is refused (login CSRF), signing in again ends the earlier sessions, a form with more
than its one field is a 400 (never a 500), the cookie is Secure when set so; and a refused
job's page states no attempt limit, timeout or dispatch it never had."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from ledger.persistence.memory import MemoryStore
from ledger.runtime.ledger import Ledger
from tests.console.ledger_rows import Seeded, seed

SIGN_IN = "/console/sign-in"


@pytest.fixture
def ledger() -> Ledger:
    return Ledger(MemoryStore())


@pytest.fixture
def seeded(ledger: Ledger) -> Seeded:
    return seed(ledger)


def browser(ledger: Ledger, base_url: str = "http://testserver") -> TestClient:
    return TestClient(create_app(ledger, None), base_url=base_url, follow_redirects=False)


@pytest.fixture
def client(ledger: Ledger, seeded: Seeded) -> Iterator[TestClient]:
    with browser(ledger) as test_client:
        yield test_client


def with_cookie(client: TestClient, sid: str, path: str = "/console/jobs") -> int:
    """The status of `path` for a browser that holds only this session cookie."""
    client.cookies.clear()
    return client.get(path, headers={"Cookie": f"outcomes_console={sid}"}).status_code


def signed_in(client: TestClient, token: str, **headers: str) -> str:
    answer = client.post(SIGN_IN, data={"token": token}, headers=headers)
    assert answer.status_code == 303, answer.text
    return answer.cookies["outcomes_console"]


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://evil.example"},
        {"Origin": "http://testserver.evil.example"},
        {"Origin": "null"},  # a sandboxed frame, or a page behind a cross-site redirect
        {"Origin": "http://testserver:8080"},  # another port: another origin
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "cross-site", "Origin": "http://testserver"},
        {"Sec-Fetch-Site": "same-site", "Origin": "https://blog.testserver"},  # a sibling
    ],
)
def test_a_sign_in_from_another_sites_page_is_refused(
    client: TestClient, seeded: Seeded, headers: dict[str, str]
) -> None:
    answer = client.post(SIGN_IN, data={"token": seeded.operator}, headers=headers)
    assert answer.status_code == 403
    assert "another site" in answer.text and seeded.operator not in answer.text
    assert "set-cookie" not in answer.headers
    assert client.get("/console/jobs").status_code == 303  # no session was opened


@pytest.mark.parametrize(
    "headers",
    [
        {},  # a program: neither header
        {"Origin": "http://testserver", "Sec-Fetch-Site": "same-origin"},  # the console's form
        {"Origin": "https://testserver"},  # the form over HTTPS, TLS ended by a proxy in front
        {"Origin": "null", "Sec-Fetch-Site": "same-origin"},  # a page under no-referrer
        {"Origin": "https://ledger.example.com", "Sec-Fetch-Site": "same-origin"},  # Host rewritten
        {"Sec-Fetch-Site": "none"},
    ],
)
def test_the_consoles_own_form_signs_in(
    client: TestClient, seeded: Seeded, headers: dict[str, str]
) -> None:
    signed_in(client, seeded.operator, **headers)
    assert client.get("/console/jobs").status_code == 200


def test_the_consoles_pages_let_its_forms_send_their_origin(client: TestClient) -> None:
    # Under no-referrer a browser sends `Origin: null` even to the page's own server.
    assert client.get(SIGN_IN).headers["referrer-policy"] == "same-origin"


def test_an_origin_the_operator_lists_may_post_the_form(
    ledger: Ledger, seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A proxy that rewrites Host: the page's origin is the public name, not what we see.
    monkeypatch.setenv("OUTCOMES_ALLOWED_ORIGINS", "https://ledger.example.com")
    with browser(ledger) as client:
        signed_in(client, seeded.operator, Origin="https://ledger.example.com")
        answer = client.post(
            SIGN_IN, data={"token": seeded.operator}, headers={"Origin": "https://evil.example"}
        )
        assert answer.status_code == 403


def test_a_sign_out_from_another_site_is_refused(client: TestClient, seeded: Seeded) -> None:
    signed_in(client, seeded.auditor)
    answer = client.post("/console/sign-out", headers={"Origin": "https://evil.example"})
    assert answer.status_code == 403
    assert client.get("/console/audit").status_code == 200  # still signed in


def test_signing_in_again_ends_the_browsers_earlier_session(
    client: TestClient, seeded: Seeded
) -> None:
    first = signed_in(client, seeded.operator)
    second = signed_in(client, seeded.auditor)  # the same browser, another token
    assert first != second
    assert with_cookie(client, first) == 303  # the old cookie opens nothing any more
    assert with_cookie(client, second) == 200


def test_one_session_per_token(client: TestClient, seeded: Seeded) -> None:
    laptop = signed_in(client, seeded.operator)
    client.cookies.clear()  # another browser: it sends no cookie
    tablet = signed_in(client, seeded.acme_operator)  # another token: a session of its own
    client.cookies.clear()
    desktop = signed_in(client, seeded.operator)  # the same token, elsewhere
    assert with_cookie(client, laptop) == 303
    assert with_cookie(client, desktop) == 200 and with_cookie(client, tablet) == 200


def test_a_failed_sign_in_leaves_the_session_alone(client: TestClient, seeded: Seeded) -> None:
    signed_in(client, seeded.operator)
    assert client.post(SIGN_IN, data={"token": "ol_not-a-token"}).status_code == 401
    assert client.get("/console/jobs").status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        b"a=1&b=2&c=3&d=4&e=5&token=x",  # over four fields: was a 500 and a traceback
        b"token=x&token=y",  # which one?
        b"token=x&remember=1",  # not a field of the form
        b"token=x&",
        b"&" * 2000,
    ],
)
def test_a_form_that_is_not_the_sign_in_form_is_400(
    client: TestClient, seeded: Seeded, body: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    body = body.replace(b"x", seeded.operator.encode())
    answer = client.post(SIGN_IN, content=body, headers=form)
    assert answer.status_code == 400
    assert "one field" in answer.text and "set-cookie" not in answer.headers
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


def test_the_cookie_is_secure_over_https_or_when_set_so(
    ledger: Ledger, seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    def cookie(client: TestClient) -> str:
        answer = client.post(SIGN_IN, data={"token": seeded.operator})
        assert answer.status_code == 303
        return answer.headers["set-cookie"]

    with browser(ledger) as plain, browser(ledger, "https://testserver") as tls:
        assert "Secure" not in cookie(plain)
        assert "Secure" in cookie(tls)
    monkeypatch.setenv("OUTCOMES_COOKIE_SECURE", "1")
    with browser(ledger) as behind_a_proxy:
        assert "Secure" in cookie(behind_a_proxy)
        answer = behind_a_proxy.post("/console/sign-out")
        assert "Secure" in answer.headers["set-cookie"]  # the same cookie, deleted


def test_a_refused_jobs_page_states_nothing_it_never_had(
    client: TestClient, seeded: Seeded
) -> None:
    submitted = client.post(
        "/v1/jobs",
        json={"tool": "no.such_tool", "args": {}},
        headers={"Authorization": f"Bearer {seeded.agent}"},
    )
    assert submitted.status_code == 422
    refused = submitted.json()["job_id"]
    signed_in(client, seeded.operator)
    page = client.get(f"/console/jobs/{refused}").text
    facts = page.split('<dl class="facts">')[1].split("</dl>")[0]
    assert "<dt>Dispatches</dt><dd>never dispatched (refused)</dd>" in facts
    assert "<dt>Max attempts</dt><dd>—</dd>" in facts and "<dt>Timeout (s)</dt><dd>—</dd>" in facts
    assert "300" not in facts
    accepted = client.get(f"/console/jobs/{seeded.failed}").text
    assert "never dispatched" not in accepted and "<dt>Max attempts</dt><dd>—" not in accepted

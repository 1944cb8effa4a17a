"""The console's approvals page in a real browser (headless chromium) against a real `outcomes
serve` (embedded: its own worker and reconciler; docs/approvals.md): an approver signs in,
sees the parked call with its reason, approves it with a reason, and the worker runs it; denies
another, which ends refused; a form another site's page submits decides nothing (the console's
CSRF rules: SameSite=Strict, and `Sec-Fetch-Site`/`Origin` checked before anything is read)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as seen
from selenium.webdriver.support.ui import WebDriverWait

from tests.console.browser import chromium, require_chromium
from tests.console.workload import _cli, _output
from tests.serving import embedded_env, free_port, serving

WAIT_S = 20
TOOL = "itest.charge_approved"  # tests/tools.py: every call waits for a person


@dataclass(frozen=True)
class Served:
    base: str
    agent: str
    approver: str
    approver_id: str
    operator: str


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    require_chromium()
    home = tmp_path_factory.mktemp("approvals")
    env = embedded_env(OUTCOMES_TOOLS="examples.seed_tools,tests.tools")
    with serving(home, env) as base:
        made = {
            role: _output(
                _cli(home, env, "tokens", "create", "--account", "acme", "--role", role, "--json")
            )
            for role in ("agent", "approver")
        }
        operator = _output(
            _cli(home, env, "tokens", "create", "--account", "*", "--role", "operator", "--json")
        )
        yield Served(
            base,
            str(made["agent"]["token"]),
            str(made["approver"]["token"]),
            str(made["approver"]["id"]),
            str(operator["token"]),
        )


@pytest.fixture(scope="module")
def browser(served: Served) -> Iterator[WebDriver]:
    with chromium() as driver:
        yield driver  # type: ignore[misc]


def park(served: Served, amount: int) -> str:
    answer = httpx.post(
        f"{served.base}/v1/jobs",
        json={"tool": TOOL, "args": {"amount": amount}},
        headers={"Authorization": f"Bearer {served.agent}"},
        timeout=30,
    )
    assert answer.status_code == 202 and answer.json()["status"] == "awaiting_approval"
    job_id: str = answer.json()["job_id"]
    return job_id


def outcome(served: Served, job_id: str) -> dict[str, Any]:
    answer = httpx.get(
        f"{served.base}/v1/jobs/{job_id}?wait=30&until=terminal",
        headers={"Authorization": f"Bearer {served.agent}"},
        timeout=60,
    )
    found: dict[str, Any] = answer.json()
    return found


def sign_in(driver: WebDriver, served: Served) -> None:
    driver.delete_all_cookies()
    driver.get(f"{served.base}/console/sign-in")
    field = WebDriverWait(driver, WAIT_S).until(seen.element_to_be_clickable((By.ID, "token")))
    field.send_keys(served.approver)
    field.send_keys(Keys.ENTER)
    WebDriverWait(driver, WAIT_S).until(seen.url_contains("/console/approvals"))


def decide(driver: WebDriver, served: Served, job_id: str, button: str, reason: str) -> None:
    driver.get(f"{served.base}/console/approvals")
    row = WebDriverWait(driver, WAIT_S).until(
        seen.presence_of_element_located((By.ID, f"call-{job_id}"))
    )
    assert "needs a person's approval" in row.text
    row.find_element(By.NAME, "reason").send_keys(reason)
    row.find_element(By.CSS_SELECTOR, f"button[value={button}]").click()
    WebDriverWait(driver, WAIT_S).until(
        seen.text_to_be_present_in_element((By.CSS_SELECTOR, "[role=status]"), job_id)
    )


def test_an_approver_approves_and_denies_in_the_browser(browser: WebDriver, served: Served) -> None:
    approved, denied = park(served, 5), park(served, 6)
    sign_in(browser, served)
    decide(browser, served, approved, "approve", "checked with the customer")
    assert "approved" in browser.find_element(By.CSS_SELECTOR, "[role=status]").text
    ran = outcome(served, approved)
    assert ran["status"] == "succeeded", ran
    assert (ran["approval"]["decided_by"], ran["approval"]["decision_reason"]) == (
        served.approver_id,
        "checked with the customer",
    )
    decide(browser, served, denied, "deny", "wrong amount")
    refused = outcome(served, denied)
    assert (refused["status"], refused["error"]["cause"]) == ("refused", "approval_denied")
    assert browser.find_elements(By.ID, f"call-{approved}") == []  # decided: off the page


def test_another_sites_form_decides_nothing(
    browser: WebDriver, served: Served, tmp_path: Path
) -> None:
    job_id = park(served, 7)
    sign_in(browser, served)  # the approver's session is open in this browser
    (tmp_path / "index.html").write_text(
        "<!doctype html><title>evil</title><body>"
        f'<form id="f" method="post" action="{served.base}/console/approvals/{job_id}">'
        '<input name="decision" value="approve"><input name="reason" value="pwned"></form>'
        "<script>document.getElementById('f').submit()</script></body>"
    )
    port = free_port()

    def handler(*args: Any) -> http.server.SimpleHTTPRequestHandler:
        return http.server.SimpleHTTPRequestHandler(*args, directory=str(tmp_path))

    evil = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    thread = threading.Thread(target=evil.serve_forever, daemon=True)
    thread.start()
    try:
        # Another origin (another port; `localhost`, another site to the cookie's host).
        browser.get(f"http://localhost:{port}/index.html")
        WebDriverWait(browser, WAIT_S).until(
            seen.text_to_be_present_in_element((By.TAG_NAME, "h1"), "Sent from another site")
        )
    finally:
        evil.shutdown()
        evil.server_close()
    still = httpx.get(
        f"{served.base}/v1/jobs/{job_id}",
        headers={"Authorization": f"Bearer {served.agent}"},
        timeout=30,
    ).json()
    assert still["status"] == "awaiting_approval" and still["approval"]["decided_by"] is None


def test_an_operator_reads_a_turn(served: Served) -> None:
    """The turn view, as an operator's browser shows it."""
    headers = {"Authorization": f"Bearer {served.agent}", "Outcomes-Turn": "browser-turn"}
    answer = httpx.post(
        f"{served.base}/v1/jobs",
        json={"tool": "tracker.read_issue", "args": {"issue_ref": "T-1"}},
        headers=headers,
        timeout=30,
    )
    assert answer.status_code == 202
    outcome(served, answer.json()["job_id"])
    with chromium() as driver:
        driver.get(f"{served.base}/console/sign-in")
        field = WebDriverWait(driver, WAIT_S).until(seen.element_to_be_clickable((By.ID, "token")))
        field.send_keys(served.operator)
        field.send_keys(Keys.ENTER)
        WebDriverWait(driver, WAIT_S).until(seen.url_contains("/console/jobs"))
        driver.get(f"{served.base}/console/turns/acme/browser-turn")
        WebDriverWait(driver, WAIT_S).until(
            seen.text_to_be_present_in_element((By.CSS_SELECTOR, "[role=status]"), "1 call: ")
        )
        assert "1 succeeded" in driver.find_element(By.CSS_SELECTOR, "[role=status]").text

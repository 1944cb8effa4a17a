"""The console in a real browser (headless chromium) against a real `outcomes serve` with a mixed
workload (`tests.console.workload`): sign in, the failed job in the list, its timeline, the
reconciler's worker_lost finding, the active brake; an agent token refused; and no page ever
shows the canary (a declared secret argument) or a token."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as seen
from selenium.webdriver.support.ui import WebDriverWait

from tests.console.browser import chromium, require_chromium
from tests.console.ledger_rows import CANARY
from tests.console.workload import BRAKE_REASON, Workload, deployment

WAIT_S = 15


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workload]:
    require_chromium()
    with deployment(tmp_path_factory.mktemp("console")) as running:
        yield running


@pytest.fixture(scope="module")
def browser(workload: Workload) -> Iterator[WebDriver]:
    with chromium() as driver:
        yield driver  # type: ignore[misc]


@pytest.fixture(scope="module")
def pages() -> list[tuple[str, str]]:
    """Every page the tests saw (url, HTML), for the canary check at the end."""
    return []


def _open(driver: WebDriver, url: str, pages: list[tuple[str, str]], heading: str) -> None:
    driver.get(url)
    WebDriverWait(driver, WAIT_S).until(
        seen.text_to_be_present_in_element((By.TAG_NAME, "h1"), heading)
    )
    pages.append((driver.current_url, driver.page_source))


def _sign_in(driver: WebDriver, base: str, token: str) -> None:
    driver.delete_all_cookies()
    driver.get(f"{base}/console/sign-in")
    field = WebDriverWait(driver, WAIT_S).until(seen.element_to_be_clickable((By.ID, "token")))
    field.send_keys(token)
    field.send_keys(Keys.ENTER)  # the keyboard submits the form


def test_an_agent_token_is_refused(
    browser: WebDriver, workload: Workload, pages: list[tuple[str, str]]
) -> None:
    _sign_in(browser, workload.base, workload.agent)
    WebDriverWait(browser, WAIT_S).until(
        seen.text_to_be_present_in_element((By.TAG_NAME, "h1"), "operators and auditors")
    )
    assert "agent token" in browser.find_element(By.CSS_SELECTOR, "[role=alert]").text
    pages.append((browser.current_url, browser.page_source))
    browser.get(f"{workload.base}/console/jobs")  # no session was opened
    WebDriverWait(browser, WAIT_S).until(seen.url_contains("/console/sign-in"))


def test_an_operator_sees_the_failed_job_and_opens_its_timeline(
    browser: WebDriver, workload: Workload, pages: list[tuple[str, str]]
) -> None:
    _sign_in(browser, workload.base, workload.operator)
    WebDriverWait(browser, WAIT_S).until(seen.url_contains("/console/jobs"))
    _open(browser, f"{workload.base}/console/jobs?status=failed", pages, "Jobs")
    link = browser.find_element(By.CSS_SELECTOR, f"a[href='/console/jobs/{workload.failed}']")
    row = link.find_element(By.XPATH, "./ancestor::tr").text
    assert "tracker.read_issue" in row and "failed" in row and "SOURCE_UNRELIABLE" in row
    link.click()
    WebDriverWait(browser, WAIT_S).until(
        seen.text_to_be_present_in_element((By.TAG_NAME, "h1"), workload.failed)
    )
    pages.append((browser.current_url, browser.page_source))
    steps = [s.text for s in browser.find_elements(By.CSS_SELECTOR, "ol.timeline > li")]
    assert [s.split("\n")[0] for s in steps] == [
        "DECISION",
        "START",
        "RETRY",
        "START",
        "OUTCOME",
    ], steps
    assert (
        "Attempt 1 failed, retry scheduled" in steps[2]
        and "fingerprint tracker-config-v1" in steps[2]
    )
    assert "worker " in steps[1] and "lease until" in steps[1]
    assert all("✓ link verifies" in s for s in steps)
    assert "auditors only" in browser.page_source  # an operator sees no hash


def test_the_reconcilers_worker_lost_finding(
    browser: WebDriver, workload: Workload, pages: list[tuple[str, str]]
) -> None:
    _open(browser, f"{workload.base}/console/jobs/{workload.lost}", pages, workload.lost)
    finding = browser.find_element(By.CSS_SELECTOR, "li.step-finding").text
    assert "Reconciler: outcome missing (worker_lost)" in finding
    assert "verify_at_source" in browser.find_element(By.CSS_SELECTOR, "dl.facts").text
    _open(browser, f"{workload.base}/console/silence", pages, "Silence")
    assert "worker_lost: 1" in browser.find_element(By.CSS_SELECTOR, ".legend").text
    assert browser.find_elements(By.CSS_SELECTOR, f"a[href='/console/jobs/{workload.lost}']")


def test_the_active_brake_with_the_command_to_pull_one(
    browser: WebDriver, workload: Workload, pages: list[tuple[str, str]]
) -> None:
    _open(browser, f"{workload.base}/console/brakes", pages, "Brakes")
    active = browser.find_element(By.CSS_SELECTOR, "table.brakes tbody").text
    assert "tool:social.draw_card" in active and BRAKE_REASON in active
    assert "outcomes brake pull" in browser.find_element(By.CSS_SELECTOR, "aside.note").text
    assert active.split(BRAKE_REASON)[1].split()[-2] == "1"  # the job it refused


def test_audit_and_the_live_list(
    browser: WebDriver, workload: Workload, pages: list[tuple[str, str]]
) -> None:
    _open(browser, f"{workload.base}/console/audit", pages, "Audit")
    assert browser.find_element(By.PARTIAL_LINK_TEXT, "Download the events").get_attribute("href")
    _open(browser, f"{workload.base}/console/jobs", pages, "Jobs")
    status = browser.find_element(By.ID, "live-status")
    WebDriverWait(browser, WAIT_S).until(lambda _: "updated" in status.text)  # the script polled
    # Every resource the pages loaded came from the server itself (no CDN, no font service).
    found: Any = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
    )
    assert found and all(str(url).startswith(workload.base) for url in found), found


def test_no_page_shows_an_argument_value_or_a_secret(
    browser: WebDriver, workload: Workload, pages: list[tuple[str, str]]
) -> None:
    _open(browser, f"{workload.base}/console/jobs/{workload.canary}", pages, workload.canary)
    cookie = {c["name"]: c["value"] for c in browser.get_cookies()}
    with httpx.Client(base_url=workload.base, cookies=cookie) as session:
        export = session.get("/console/audit/export.jsonl")
        rows = session.get("/console/jobs/rows")
    assert export.status_code == 200 and workload.canary in export.text
    secrets = (CANARY, workload.operator, workload.auditor, workload.agent)
    seen_pages = [*pages, ("export", export.text), ("rows", rows.text)]
    assert len(seen_pages) >= 10
    leaks = [(url, s[:10]) for url, html in seen_pages for s in secrets if s in html]
    assert leaks == []
    log = (workload.home / "serve.log").read_text(errors="replace")
    assert not [s[:10] for s in secrets[1:] if s in log]  # nor a token in serve's log
    assert all("(secret)" in html for url, html in pages if workload.canary in url)


def test_signing_out_ends_the_session(browser: WebDriver, workload: Workload) -> None:
    browser.get(f"{workload.base}/console/jobs")
    button = WebDriverWait(browser, WAIT_S).until(
        seen.element_to_be_clickable((By.XPATH, "//button[text()='Sign out']"))
    )
    button.click()
    WebDriverWait(browser, WAIT_S).until(seen.url_contains("/console/sign-in"))
    browser.get(f"{workload.base}/console/brakes")
    WebDriverWait(browser, WAIT_S).until(seen.url_contains("/console/sign-in"))

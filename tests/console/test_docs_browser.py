"""`/docs` in a real browser (headless chromium) against uvicorn: Swagger UI, served by this
server, renders every operation under the page's strict policy (no inline script, nothing from
another site) without one violation; and the console's own sign-in works in the same browser
(its form's Origin and Sec-Fetch-Site are this server's)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as seen
from selenium.webdriver.support.ui import WebDriverWait

from api.server import BackgroundServer
from ledger.persistence.memory import MemoryStore
from ledger.runtime.ledger import Ledger
from ledger.services import tokens
from tests.console.browser import chromium, require_chromium

WAIT_S = 15
# Runs before any of the page's scripts (DevTools), outside the page's policy: it records
# every violation the policy reports.
RECORD_VIOLATIONS = (
    "window.__violations = [];"
    "document.addEventListener('securitypolicyviolation',"
    " e => window.__violations.push(e.violatedDirective + ' ' + e.blockedURI));"
)


@pytest.fixture(scope="module")
def operator_and_base() -> Iterator[tuple[str, str]]:
    require_chromium()
    ledger = Ledger(MemoryStore())
    operator = tokens.create(ledger, "*", "operator", None, actor="tests").token
    server = BackgroundServer(ledger, None)
    base = server.start()
    try:
        yield operator, base
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser(operator_and_base: tuple[str, str]) -> Iterator[WebDriver]:
    with chromium() as driver:
        driver.execute_cdp_cmd(  # type: ignore[attr-defined]
            "Page.addScriptToEvaluateOnNewDocument", {"source": RECORD_VIOLATIONS}
        )
        yield driver  # type: ignore[misc]


def test_swagger_ui_renders_from_this_server_under_its_policy(
    browser: WebDriver, operator_and_base: tuple[str, str]
) -> None:
    _operator, base = operator_and_base
    browser.get(f"{base}/docs")
    WebDriverWait(browser, WAIT_S).until(
        seen.presence_of_element_located((By.CSS_SELECTOR, ".opblock-summary"))
    )
    assert "/v1/jobs" in browser.find_element(By.CSS_SELECTOR, ".swagger-ui").text
    browser.find_elements(By.CSS_SELECTOR, ".opblock-summary")[0].click()  # draws more UI
    WebDriverWait(browser, WAIT_S).until(
        seen.presence_of_element_located((By.CSS_SELECTOR, ".opblock-body"))
    )
    loaded = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
    )
    assert loaded and all(url.startswith(base) for url in loaded), loaded
    assert browser.execute_script("return window.__violations") == []


def test_the_consoles_form_signs_in_from_its_own_page(
    browser: WebDriver, operator_and_base: tuple[str, str]
) -> None:
    operator, base = operator_and_base
    browser.get(f"{base}/console/sign-in")
    field = WebDriverWait(browser, WAIT_S).until(seen.element_to_be_clickable((By.ID, "token")))
    field.send_keys(operator)
    field.send_keys(Keys.ENTER)
    WebDriverWait(browser, WAIT_S).until(seen.url_contains("/console/jobs"))
    assert browser.execute_script("return window.__violations") == []

"""Debian's chromium, headless, driven by Selenium through chromedriver (no download: both are
named by path). Without them the tests skip on a laptop and fail under CI=true."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.databases import IN_CI

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# Root in a container needs --no-sandbox; the rest keep the browser off the network and quiet.
ARGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
)


def require_chromium() -> None:
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not shutil.which(path)]
    if missing:
        reason = f"{', '.join(missing)} missing (apt-get install chromium chromium-driver)"
        if IN_CI:
            pytest.fail(f"{reason} (CI=true: browser tests may not skip)")
        pytest.skip(reason)


@contextmanager
def chromium(width: int = 1280, height: int = 900) -> Iterator[object]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    with tempfile.TemporaryDirectory(prefix="console-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for arg in (*ARGS, f"--window-size={width},{height}", f"--user-data-dir={profile}"):
            options.add_argument(arg)
        driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
        try:
            yield driver
        finally:
            driver.quit()

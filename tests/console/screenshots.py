"""Screenshots of the console for the docs, from the same deployment the browser tests use.

Run:  .venv/bin/python -m tests.console.screenshots [--to docs]

Writes console-jobs.png (the list, signed in as an operator), console-job.png (the failed job's
timeline, as an auditor: with its chain links) and console-silence.png."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as seen
from selenium.webdriver.support.ui import WebDriverWait

from tests.console.browser import chromium
from tests.console.workload import Workload, deployment

WIDTH = 1280
MAX_HEIGHT = 2000


def _shoot(driver: Any, url: str, heading: str, path: Path) -> None:
    driver.set_window_size(WIDTH, 900)
    driver.get(url)
    WebDriverWait(driver, 15).until(
        seen.text_to_be_present_in_element((By.TAG_NAME, "h1"), heading)
    )
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    driver.set_window_size(WIDTH, min(height + 140, MAX_HEIGHT))  # + the window's chrome
    driver.save_screenshot(str(path))
    print(f"wrote {path}")


def _sign_in(driver: Any, base: str, token: str) -> None:
    driver.delete_all_cookies()
    driver.get(f"{base}/console/sign-in")
    driver.find_element(By.ID, "token").send_keys(token + "\n")
    WebDriverWait(driver, 15).until(seen.url_contains("/console/jobs"))


def shoot(work: Workload, to: Path) -> None:
    with chromium() as driver:
        _sign_in(driver, work.base, work.operator)
        _shoot(driver, f"{work.base}/console/jobs", "Jobs", to / "console-jobs.png")
        _shoot(driver, f"{work.base}/console/silence", "Silence", to / "console-silence.png")
        _sign_in(driver, work.base, work.auditor)
        _shoot(driver, f"{work.base}/console/jobs/{work.failed}", "Job", to / "console-job.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--to", type=Path, default=Path(__file__).resolve().parents[2] / "docs")
    options = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="console-shots-") as home,
        deployment(Path(home)) as work,
    ):
        shoot(work, options.to)


if __name__ == "__main__":
    main()

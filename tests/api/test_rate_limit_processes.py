"""The per-account submit rate holds across two real API processes: two `outcomes serve
--api-only` over one ledger draw on one bucket (the database's), so a burst of 3 admits three
submits between them, whichever process each reaches, and the next ones are 429 there and
here, with nothing recorded for them."""

from __future__ import annotations

from pathlib import Path

import httpx

from ledger.runtime.ledger import open_ledger
from ledger.services import admin, audit
from ledger.services.tokens import create as create_token
from tests.serving import embedded_env, serving
from tests.tools import ECHO


def test_two_api_processes_share_one_bucket(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with open_ledger(url) as ledger:
        admin.migrate(ledger)
        token = create_token(ledger, "acme", "agent", None, actor="tests").token
    env = embedded_env(
        OUTCOMES_DATABASE_URL=url,
        OUTCOMES_TOOLS="tests.tools",
        OUTCOMES_RATE_LIMIT_PER_S="0.01",  # a refill too slow to matter here: the burst admits
        OUTCOMES_RATE_LIMIT_BURST="3",
    )
    homes = [tmp_path / "a", tmp_path / "b"]
    for home in homes:
        home.mkdir()
    headers = {"Authorization": f"Bearer {token}"}
    body = {"tool": ECHO, "args": {"text": "x"}}
    with serving(homes[0], env, api_only=True) as a, serving(homes[1], env, api_only=True) as b:
        codes = [
            httpx.post(f"{base}/v1/jobs", json=body, headers=headers).status_code
            for base in (a, b, a)
        ]
        with open_ledger(url) as ledger:
            before = audit.head(ledger).position
        refused = [httpx.post(f"{base}/v1/jobs", json=body, headers=headers) for base in (b, a)]
        with open_ledger(url) as ledger:
            after = audit.head(ledger).position
    assert codes == [202, 202, 202]
    assert [r.status_code for r in refused] == [429, 429]
    assert {r.json()["error"]["cause"] for r in refused} == {"rate_limit"}
    assert after == before  # a limited submit records nothing

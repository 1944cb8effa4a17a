"""An archived job answers 410 Gone, saying when it was archived, to its own account, and the
404 of an unknown id to any other (docs/archive.md); the tokens recorded in the archived range
still authenticate (their streams stay in the database)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services import archive
from tests.plugins.api import Tokens, bearer
from tests.plugins.archiving import ended_jobs, soon


@pytest.fixture
def database_url(tiny_url: str) -> str:
    """The API's ledger, with tiny partitions (the `store` fixture opens it)."""
    return tiny_url


def test_an_archived_job_is_gone_for_its_account_and_unknown_to_others(
    client: TestClient, store: SqlStore, tokens: Tokens, tmp_path: Path
) -> None:
    made = ended_jobs(store, 14, account="acme")
    done = archive.archive(Ledger(store), tmp_path, soon())
    gone = next(j for j in made if store.archived_job(j) is not None)
    for path in (f"/v1/jobs/{gone}", f"/v1/jobs/{gone}/events"):
        answer = client.get(path, headers=bearer(tokens.acme))  # a token from the archived range
        assert answer.status_code == 410, answer.text
        body = answer.json()
        assert body["error"]["code"] == "REFERENCE_UNRESOLVED"
        assert body["archived_at"] == done.record.created_at.isoformat()
        assert "archived" in body["error"]["message"]
        other = client.get(path, headers=bearer(tokens.globex))
        unknown = client.get(path.replace(gone, "0" * 8 + gone[8:]), headers=bearer(tokens.globex))
        assert other.status_code == unknown.status_code == 404
        assert other.json() == unknown.json()
    kept = made[-1]
    assert client.get(f"/v1/jobs/{kept}", headers=bearer(tokens.acme)).status_code == 200

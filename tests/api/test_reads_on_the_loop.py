"""On Postgres an agent's GET reads its job on the event loop, with no thread hop, once this
process knows the token; a revoked token is still refused on its next request. Elsewhere
(SQLite) the same reads take a thread."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services import jobs
from ledger.services.tokens import revoke
from tests.plugins.api import Tokens, bearer, new_job


def test_a_known_tokens_reads_take_no_thread_hop_on_postgres(
    client: TestClient, tokens: Tokens, store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = new_job(client, tokens.acme)  # the submit admits the token in this process
    hopped: list[str] = []
    real = jobs.in_thread

    async def counted(call: Any, *args: Any) -> Any:
        hopped.append(call.__name__)
        return await real(call, *args)

    monkeypatch.setattr(jobs, "in_thread", counted)
    plain = client.get(f"/v1/jobs/{job_id}", headers=bearer(tokens.acme))
    waited = client.get(f"/v1/jobs/{job_id}?wait=0.05", headers=bearer(tokens.acme))
    missing = client.get(f"/v1/jobs/{uuid.uuid4()}", headers=bearer(tokens.acme))
    assert (plain.status_code, waited.status_code, missing.status_code) == (200, 200, 404)
    assert plain.json()["job_id"] == waited.json()["job_id"] == job_id
    on_postgres = store.dialect == "postgresql"
    # A miss asks whether the job was archived on a thread (guesses never hold up the loop).
    assert hopped == (["not_found"] if on_postgres else ["get_admitted"] * 3)

    revoke(Ledger(store), tokens.acme_id, actor="another process")
    refused = client.get(f"/v1/jobs/{job_id}?wait=0.05", headers=bearer(tokens.acme))
    assert refused.status_code == 401
    # Forgotten once refused: the next request reads the token (on a thread) and is refused.
    again = client.get(f"/v1/jobs/{job_id}", headers=bearer(tokens.acme))
    assert again.status_code == 401
    assert hopped[-1] == "get_admitted"

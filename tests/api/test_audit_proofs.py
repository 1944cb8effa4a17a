"""GET /v1/audit/head and /v1/audit/proofs/{job_id}: auditors and operators only (agents never
see positions or tree sizes), an account's auditor only its account's jobs, and the receipt
is the one `outcomes audit check-proof` takes."""

from __future__ import annotations

from fastapi.testclient import TestClient

from ledger.events import job_stream
from ledger.persistence.sql_store import SqlStore
from ledger.receipts import check_document
from tests.factories import started, succeeded
from tests.plugins.api import Tokens, bearer, new_job


def test_head_and_receipt(client: TestClient, tokens: Tokens, store: SqlStore) -> None:
    job = new_job(client, tokens.acme)
    other = new_job(client, tokens.globex)
    waiting = new_job(client, tokens.acme)
    for one in (job, other):
        store.append(job_stream(one), [started(), succeeded(answer=1)])

    head = client.get("/v1/audit/head", headers=bearer(tokens.auditor))
    assert head.status_code == 200 and head.json()["tree_size"] > 0
    assert client.get("/v1/audit/head", headers=bearer(tokens.acme)).status_code == 403

    found = client.get(f"/v1/audit/proofs/{job}", headers=bearer(tokens.auditor))
    assert found.status_code == 200, found.text
    receipt = found.json()
    assert check_document(receipt).head.tree_size == head.json()["tree_size"]
    assert client.get(f"/v1/audit/proofs/{job}", headers=bearer(tokens.acme)).status_code == 403
    mine = client.get(f"/v1/audit/proofs/{job}", headers=bearer(tokens.acme_auditor))
    assert mine.status_code == 200
    theirs = client.get(f"/v1/audit/proofs/{other}", headers=bearer(tokens.acme_auditor))
    assert theirs.status_code == 404
    open_job = client.get(f"/v1/audit/proofs/{waiting}", headers=bearer(tokens.auditor))
    assert open_job.status_code == 409
    assert client.get("/v1/audit/proofs/nope", headers=bearer(tokens.auditor)).status_code == 404

"""Liveness needs nothing; readiness needs the ledger's database (and says so when it is not)."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from api.app import create_app
from ledger.runtime.ledger import Ledger
from tests.factories import open_sql
from tests.plugins.api import RecordingDispatcher


def test_healthz_and_readyz(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready"}  # public: nothing about the ledger's volume


def test_the_root_sends_a_person_to_the_docs(client: TestClient) -> None:
    response = client.get("/", follow_redirects=False)
    assert (response.status_code, response.headers["location"]) == (307, "/docs")
    assert client.get("/").status_code == 200  # the docs page itself
    assert "/" not in client.get("/openapi.json").json()["paths"]


def test_readyz_is_503_problem_when_the_ledger_is_not_there(tmp_path: Path) -> None:
    store = open_sql(f"sqlite:///{tmp_path / 'never-migrated.db'}")
    try:
        with TestClient(create_app(Ledger(store), RecordingDispatcher())) as client:
            assert client.get("/healthz").status_code == 200
            response = client.get("/readyz")
            assert response.status_code == 503
            assert response.headers["content-type"] == "application/problem+json"
            assert response.headers["retry-after"] == "1"
            assert response.json()["error"]["code"] == "SOURCE_UNRELIABLE"
            # Every route that needs the ledger answers the same way, never a bare 500.
            jobs = client.get("/v1/jobs", headers={"Authorization": "Bearer ol_x"})
            assert jobs.status_code == 503
            assert jobs.headers["content-type"] == "application/problem+json"
    finally:
        store.close()

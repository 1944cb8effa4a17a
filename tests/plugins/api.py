"""The API over a real ledger on each backend (the `store` fixture), with tokens for two
accounts and every role, and a dispatcher that only records (workers are tested elsewhere).

Fixtures: `dispatcher`, `app`, `client`, `tokens`. Helpers: `Tokens`, `bearer`, `new_job`,
`RecordingDispatcher`."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.app import create_app
from ledger.access import hash_token, new_token, token_stream
from ledger.events import NewEvent, TokenCreated
from ledger.persistence.appends import NO_STREAM
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services.tokens import create as create_token
from tests.tools import ECHO  # importing tests.tools registers the tools the tests submit to


class RecordingDispatcher:
    def __init__(self) -> None:
        self.job_ids: list[str] = []
        self._lock = threading.Lock()

    def dispatch(self, job_id: str, delay_s: float = 0.0) -> None:
        with self._lock:
            self.job_ids.append(job_id)


def published(client: TestClient, dispatcher: RecordingDispatcher) -> list[str]:
    """What the app's outbox handed to the dispatcher, once it has published everything
    submitted so far (it publishes on threads of its own, after the answer)."""
    outbox = client.app.state.api.outbox  # type: ignore[attr-defined]
    # Generous: a loaded CI machine has starved these threads for seconds.
    assert outbox.flush(timeout_s=30), f"the outbox did not publish in time: {outbox.pending()}"
    return list(dispatcher.job_ids)


@dataclass(frozen=True)
class Tokens:
    acme: str  # agent of account acme
    acme_id: str
    globex: str  # agent of account globex
    echo_only: str  # agent of acme, allowed apitest.echo only
    auditor: str  # auditor of every account
    operator: str  # operator of every account
    acme_auditor: str  # auditor of acme only
    everyone_agent: str  # an agent token scoped to '*', recorded before that was refused


@pytest.fixture
def dispatcher() -> RecordingDispatcher:
    return RecordingDispatcher()


@pytest.fixture
def app(store: SqlStore, dispatcher: RecordingDispatcher) -> FastAPI:
    return create_app(Ledger(store), dispatcher)


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture
def tokens(store: SqlStore) -> Tokens:
    def token(account: str, role: str, tools: list[str] | None = None) -> tuple[str, str]:
        issued = create_token(Ledger(store), account, role, tools, actor="tests")
        return issued.token, issued.view.token_id

    acme, acme_id = token("acme", "agent")
    return Tokens(
        acme=acme,
        acme_id=acme_id,
        globex=token("globex", "agent")[0],
        echo_only=token("acme", "agent", ["apitest.echo"])[0],
        auditor=token("*", "auditor")[0],
        operator=token("*", "operator")[0],
        acme_auditor=token("acme", "auditor")[0],
        everyone_agent=legacy_token(store, "*", "agent"),
    )


def legacy_token(store: SqlStore, account: str, role: str) -> str:
    """A token recorded directly, as an older release could (the service refuses it now)."""
    secret, token_id = new_token(), f"legacy-{account}-{role}"
    created = TokenCreated(
        token_id=token_id, account=account, role=role, token_hash=hash_token(secret)
    )
    store.append(token_stream(token_id), [NewEvent(payload=created, actor="tests")], NO_STREAM)
    return secret


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def new_job(client: TestClient, token: str, text: str = "x") -> str:
    """Submit an echo job through the API; its job id."""
    response = client.post(
        "/v1/jobs", json={"tool": ECHO, "args": {"text": text}}, headers=bearer(token)
    )
    assert response.status_code == 202, response.text
    job_id: str = response.json()["job_id"]
    return job_id

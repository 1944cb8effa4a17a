"""`GET /v1/jobs/{id}?wait=S` answers as soon as the job changes, not when S runs out.

Sequenced with events, not sleeps: the outcome is recorded only once the request is known to
be waiting (the waiter's `on_wait` hook), from another thread, as a worker would.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from ledger.events import NewEvent, job_stream
from ledger.persistence.sql_store import SqlStore
from tests.factories import started, succeeded
from tests.plugins.api import Tokens, bearer, new_job

WAIT_S = 30.0
SOON_S = 5.0  # "well before the limit": a wake-up, not a timeout


@pytest.fixture
def hinted_client(app: FastAPI, store: SqlStore) -> Iterator[TestClient]:
    """The polling fallback is switched off, so only a push can wake: LISTEN/NOTIFY on
    Postgres, the ledger's bell on SQLite (a commit rings it, `ledger.doorbell`)."""
    app.state.api.waiter.poll_s = 3600.0
    with TestClient(app) as client:
        yield client


class Poll:
    """A long-poll in its own thread, and an event set once the server is waiting on it."""

    def __init__(
        self, app: FastAPI, client: TestClient, token: str, job_id: str, query: str = ""
    ) -> None:
        self.waiting = threading.Event()
        self.waits = 0  # how many times the request has gone back to waiting
        self.waited_again = threading.Event()
        app.state.api.waiter.on_wait = self._on_wait
        self.job_id = job_id
        self.response: Any = None
        self.elapsed = 0.0
        url = f"/v1/jobs/{job_id}?wait={WAIT_S}{query}"
        self.thread = threading.Thread(target=self._run, args=(client, url, token))
        self.thread.start()

    def _on_wait(self, job_id: str) -> None:
        if job_id == self.job_id:
            self.waits += 1
            self.waiting.set()
            if self.waits >= 2:
                self.waited_again.set()

    def _run(self, client: TestClient, url: str, token: str) -> None:
        begun = time.monotonic()
        self.response = client.get(url, headers=bearer(token))
        self.elapsed = time.monotonic() - begun

    def result(self) -> dict[str, Any]:
        self.thread.join(WAIT_S + 10)
        assert self.response is not None and self.response.status_code == 200
        body: dict[str, Any] = self.response.json()
        return body


def record(store: SqlStore, job_id: str, *events: NewEvent) -> None:
    store.append(job_stream(job_id), list(events))


def test_wait_returns_as_soon_as_the_outcome_is_recorded(
    app: FastAPI, hinted_client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    job_id = new_job(hinted_client, tokens.acme)
    record(store, job_id, started())  # running: only the outcome is left to wait for
    poll = Poll(app, hinted_client, tokens.acme, job_id)
    assert poll.waiting.wait(10), "the request never started waiting"
    writer = threading.Thread(target=record, args=(store, job_id, succeeded(text="done")))
    writer.start()
    writer.join()
    body = poll.result()
    assert (body["status"], body["terminal"], body["result"]) == (
        "succeeded",
        True,
        {"text": "done"},
    )
    assert poll.elapsed < SOON_S


def test_wait_returns_when_the_status_changes(
    app: FastAPI, hinted_client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    job_id = new_job(hinted_client, tokens.acme)
    poll = Poll(app, hinted_client, tokens.acme, job_id)
    assert poll.waiting.wait(10)
    record(store, job_id, started())
    body = poll.result()
    assert (body["status"], body["terminal"], body["next_action"]) == ("running", False, "wait")
    assert poll.elapsed < SOON_S


def test_until_terminal_waits_through_a_status_change_for_the_outcome(
    app: FastAPI, hinted_client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    job_id = new_job(hinted_client, tokens.acme)
    poll = Poll(app, hinted_client, tokens.acme, job_id, "&until=terminal")
    assert poll.waiting.wait(10)
    record(store, job_id, started())
    if store.dialect != "postgresql":
        # Polled: the request reads `running` and goes back to waiting (by default it would
        # answer). On Postgres the start's notification does not even wake it (see below).
        assert poll.waited_again.wait(10), "the request answered at a status change"
    record(store, job_id, succeeded(text="done"))
    body = poll.result()
    assert (body["status"], body["terminal"], body["result"]) == (
        "succeeded",
        True,
        {"text": "done"},
    )
    assert poll.elapsed < SOON_S


def test_an_unknown_until_is_a_clear_422(client: TestClient, tokens: Tokens) -> None:
    job_id = new_job(client, tokens.acme)
    response = client.get(f"/v1/jobs/{job_id}?wait=1&until=forever", headers=bearer(tokens.acme))
    assert response.status_code == 422
    assert "until" in response.text and "terminal" in response.text


def test_a_terminal_job_answers_at_once(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    job_id = new_job(client, tokens.acme)
    record(store, job_id, started(), succeeded())
    begun = time.monotonic()
    response = client.get(f"/v1/jobs/{job_id}?wait={WAIT_S}", headers=bearer(tokens.acme))
    assert response.json()["status"] == "succeeded"
    assert time.monotonic() - begun < SOON_S


def test_without_a_change_the_wait_runs_out_and_answers_the_current_state(
    client: TestClient, tokens: Tokens
) -> None:
    job_id = new_job(client, tokens.acme)
    begun = time.monotonic()
    response = client.get(f"/v1/jobs/{job_id}?wait=0.5", headers=bearer(tokens.acme))
    assert response.status_code == 200 and response.json()["status"] == "queued"
    assert time.monotonic() - begun >= 0.5

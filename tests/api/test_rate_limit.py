"""The per-account submit rate (docs/fairness.md): one bucket per account in the database, so
two API processes (here two independent apps, each with its own ledger and pool, over one
database) draw on the same bucket; a submit over it is answered 429 and writes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from ledger.fairness import Limits
from ledger.persistence.engine import make_engine
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services.tokens import revoke as revoke_token
from tests.factories import ERROR_KEYS
from tests.plugins.api import RecordingDispatcher, Tokens, bearer
from tests.store_helpers import settled_head
from tests.tools import ECHO

# A refill too slow to matter within the test: only the burst admits.
LIMITS = Limits(rate_per_s=0.01, burst=3)


@pytest.fixture
def second_client(database_url: str) -> Iterator[TestClient]:
    """Another API over the same database: its own engine, pool, outbox and ledger."""
    with SqlStore(make_engine(database_url)) as store:
        ledger = Ledger(store)
        ledger.limits = LIMITS
        with TestClient(create_app(ledger, RecordingDispatcher())) as client:
            yield client


def _submit(client: TestClient, token: str) -> Any:
    return client.post(
        "/v1/jobs", json={"tool": ECHO, "args": {"text": "x"}}, headers=bearer(token)
    )


def test_the_rate_is_one_bucket_across_api_processes_and_a_limited_submit_writes_nothing(
    client: TestClient, second_client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    client.app.state.api.ledger.limits = LIMITS  # type: ignore[attr-defined]
    answers = [_submit(c, tokens.acme) for c in (client, second_client, client)]
    assert [a.status_code for a in answers] == [202, 202, 202]
    before = settled_head(store)

    for refused in (_submit(second_client, tokens.acme), _submit(client, tokens.acme)):
        assert refused.status_code == 429, refused.text
        assert refused.headers["content-type"] == "application/problem+json"
        assert int(refused.headers["retry-after"]) >= 1
        problem = refused.json()
        assert problem["job_id"] is None
        assert set(problem["error"]) == ERROR_KEYS
        assert problem["error"]["code"] == "QUOTA_EXCEEDED"
        assert problem["error"]["cause"] == "rate_limit"
        assert problem["error"]["retry_after_s"] >= 1

    assert settled_head(store) == before  # not a refusal, not an event: nothing
    # Another account's bucket is its own.
    assert _submit(second_client, tokens.globex).status_code == 202


def test_the_bucket_refills_at_its_rate(any_store: Any) -> None:
    taken = [any_store.take_submit_token("acme", 0.5, 2) for _ in range(2)]
    assert taken == [0.0, 0.0]
    wait = any_store.take_submit_token("acme", 0.5, 2)  # empty now, refilling at 0.5/s
    assert 1.0 < wait <= 2.0  # a token in about 2 s
    assert any_store.take_submit_token("acme", 0.5, 2) > 0  # a refused take took nothing
    assert any_store.take_submit_token("globex", 0.5, 2) == 0.0


def test_a_revoked_token_is_401_not_429_while_its_account_is_rate_limited(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    """The rate is taken before the decision's append re-checks the token: a limited submit
    with a token revoked since this process admitted it must still hear 401."""
    client.app.state.api.ledger.limits = LIMITS  # type: ignore[attr-defined]
    answers = [_submit(client, tokens.acme).status_code for _ in range(4)]
    assert answers == [202, 202, 202, 429]  # admitted (known to this process), then limited
    revoke_token(Ledger(store), tokens.acme_id, actor="tests")
    refused = _submit(client, tokens.acme)
    assert refused.status_code == 401, refused.text
    assert refused.headers["www-authenticate"] == 'Bearer error="invalid_token"'
    assert _submit(client, tokens.acme).status_code == 401  # and it stays forgotten

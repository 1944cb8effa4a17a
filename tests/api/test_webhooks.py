"""`/v1/webhooks` (docs/webhooks.md): who may register, list and remove; the secret shown once
and kept only sealed; registration and removal recorded as events; the SSRF rule's typed
refusals; the deliveries' log; and the routes in /openapi.json."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from tests.plugins.api import Tokens, bearer
from tests.store_helpers import settled_head

PUBLIC_URL = "https://93.184.215.14/outcomes"  # an address: registration resolves nothing


def register(client: TestClient, token: str, **body: object) -> dict[str, object]:
    response = client.post("/v1/webhooks", json={"url": PUBLIC_URL} | body, headers=bearer(token))
    assert response.status_code == 201, response.text
    found: dict[str, object] = response.json()
    return found


def test_an_agent_registers_lists_and_removes_its_webhook_and_the_ledger_records_it(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    made = register(client, tokens.acme)
    secret = str(made["secret"])
    assert secret.startswith("whsec_") and made["account"] == "acme"
    assert made["status"] == "active"
    hook = str(made["id"])

    listed = client.get("/v1/webhooks", headers=bearer(tokens.acme)).json()["webhooks"]
    assert [h["id"] for h in listed] == [hook] and "secret" not in listed[0]
    assert client.get("/v1/webhooks", headers=bearer(tokens.globex)).json()["webhooks"] == []
    # Another account's webhook is one that does not exist.
    for token in (tokens.globex,):
        assert client.delete(f"/v1/webhooks/{hook}", headers=bearer(token)).status_code == 404
        path = f"/v1/webhooks/{hook}/deliveries"
        assert client.get(path, headers=bearer(token)).status_code == 404
    assert client.get(f"/v1/webhooks/{hook}/deliveries", headers=bearer(tokens.auditor)).json() == {
        "webhook_id": hook,
        "deliveries": [],
    }

    removed = client.delete(f"/v1/webhooks/{hook}", headers=bearer(tokens.acme))
    assert removed.status_code == 200 and removed.json()["status"] == "removed"
    assert client.get("/v1/webhooks", headers=bearer(tokens.acme)).json()["webhooks"] == []

    events = store.read_stream(f"webhook-{hook}")
    assert [(e.type, e.actor) for e in events] == [
        ("webhook.registered", tokens.acme_id),
        ("webhook.removed", tokens.acme_id),
    ]
    stored = str(events[0].data["secret"])
    assert (
        stored.startswith("ol-webhook-secret:v1:") and secret.removeprefix("whsec_") not in stored
    )
    # The audit pages show where it was, never the sealed box.
    page = client.get(
        "/v1/audit/events", params={"type": "webhook.registered"}, headers=bearer(tokens.auditor)
    )
    assert page.status_code == 200, page.text
    shown = [e for e in page.json()["items"] if e["stream_id"] == f"webhook-{hook}"]
    assert shown and shown[0]["data"]["secret"] == "(secret)"


def test_operators_register_for_an_account_they_cover_and_auditors_do_not(
    client: TestClient, tokens: Tokens
) -> None:
    missing = client.post("/v1/webhooks", json={"url": PUBLIC_URL}, headers=bearer(tokens.operator))
    assert missing.status_code == 422 and missing.json()["error"]["code"] == "INPUT_MISSING"
    made = register(client, tokens.operator, account="globex")
    assert made["account"] == "globex"
    listed = client.get("/v1/webhooks", headers=bearer(tokens.globex)).json()["webhooks"]
    assert [h["id"] for h in listed] == [made["id"]]
    other = client.post(
        "/v1/webhooks", json={"url": PUBLIC_URL, "account": "globex"}, headers=bearer(tokens.acme)
    )
    assert other.status_code == 403
    for reader in (tokens.auditor, tokens.acme_auditor):
        refused = client.post("/v1/webhooks", json={"url": PUBLIC_URL}, headers=bearer(reader))
        assert refused.status_code == 403
    assert client.post("/v1/webhooks", json={"url": PUBLIC_URL}).status_code == 401


REFUSED = [
    "http://127.0.0.1:8000/hook",
    "http://localhost/hook",
    "http://[::1]/hook",
    "http://10.0.0.7/hook",
    "http://169.254.169.254/latest/meta-data",
    "ftp://93.184.215.14/hook",
    "https://user:pw@93.184.215.14/hook",
    "https://no-such-host.invalid/hook",
]


def test_a_url_the_ssrf_rule_refuses_is_a_typed_422_and_records_nothing(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    before = settled_head(store)
    for url in REFUSED:
        response = client.post("/v1/webhooks", json={"url": url}, headers=bearer(tokens.acme))
        assert response.status_code == 422, (url, response.text)
        body = response.json()
        assert response.headers["content-type"] == "application/problem+json"
        assert body["error"]["code"] == "INPUT_INVALID"
        assert body["detail"].startswith("The webhook URL is refused"), body["detail"]
        assert "OUTCOMES_WEBHOOK_ALLOW_HOSTS" in body["error"]["fix"]
    assert settled_head(store) == before


def test_the_webhook_routes_are_documented(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert set(paths["/v1/webhooks"]) == {"get", "post"}
    assert set(paths["/v1/webhooks/{webhook_id}"]) == {"delete"}
    assert set(paths["/v1/webhooks/{webhook_id}/deliveries"]) == {"get"}
    created = paths["/v1/webhooks"]["post"]["responses"]
    assert {"201", "401", "403", "422", "503"} <= set(created)
    assert "SSRF" in created["422"]["description"]


def test_without_a_secrets_key_registration_is_refused_and_records_nothing(
    store: SqlStore, tokens: Tokens
) -> None:
    keyless = create_app(Ledger(store, keyring=None), None)
    before = settled_head(store)
    with TestClient(keyless) as client:
        response = client.post(
            "/v1/webhooks", json={"url": PUBLIC_URL}, headers=bearer(tokens.acme)
        )
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["code"] == "CAPABILITY_UNAVAILABLE" and "OUTCOMES_SECRETS_KEY" in error["message"]
    assert settled_head(store) == before


def test_an_account_has_at_most_its_webhooks_and_removing_one_makes_room(
    store: SqlStore, tokens: Tokens, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 47 (Low): webhooks per account were unbounded, and each multiplies every outcome's
    deliveries. Past OUTCOMES_MAX_WEBHOOKS_PER_ACCOUNT, 409 QUOTA_EXCEEDED (`webhook_limit`),
    nothing recorded; another account is not held by it; a removed one frees its place."""
    monkeypatch.setenv("OUTCOMES_MAX_WEBHOOKS_PER_ACCOUNT", "2")
    with TestClient(create_app(Ledger(store), None)) as client:
        first = register(client, tokens.acme)
        register(client, tokens.acme)
        refused = client.post("/v1/webhooks", json={"url": PUBLIC_URL}, headers=bearer(tokens.acme))
        assert refused.status_code == 409, refused.text
        error = refused.json()["error"]
        assert (error["code"], error["cause"]) == ("QUOTA_EXCEEDED", "webhook_limit")
        assert "already has 2 webhooks" in error["message"] and "DELETE" in error["fix"]
        hooks = client.get("/v1/webhooks", headers=bearer(tokens.acme)).json()["webhooks"]
        assert len(hooks) == 2
        register(client, tokens.globex)  # another account's count is its own
        assert client.delete(f"/v1/webhooks/{first['id']}", headers=bearer(tokens.acme)).is_success
        register(client, tokens.acme)
        openapi = client.get("/openapi.json").json()
        assert "409" in openapi["paths"]["/v1/webhooks"]["post"]["responses"]


def test_the_default_cap_is_twenty(monkeypatch: pytest.MonkeyPatch) -> None:
    from ledger.settings import load_settings

    monkeypatch.delenv("OUTCOMES_MAX_WEBHOOKS_PER_ACCOUNT", raising=False)
    assert load_settings().max_webhooks_per_account == 20

"""`outcomes webhooks list|deliveries|remove` over a real ledger on each backend."""

from __future__ import annotations

import orjson

from ledger.persistence.engine import make_engine
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services import webhooks
from tests.plugins.cli import Invoke


def register(database_url: str) -> webhooks.RegisteredWebhook:
    with SqlStore(make_engine(database_url)) as store:
        url = "https://93.184.215.14/"  # an address: nothing is resolved
        return webhooks.register(Ledger(store), "acme", url, "tests", frozenset())


def registered_webhook(database_url: str) -> str:
    return register(database_url).view.webhook_id


def test_operators_list_read_deliveries_and_remove_webhooks(
    outcomes: Invoke, database_url: str
) -> None:
    made = register(database_url)
    hook = made.view.webhook_id
    listed = orjson.loads(outcomes("webhooks", "list", "--json").stdout)["webhooks"]
    assert [(h["id"], h["status"]) for h in listed] == [(hook, "active")]
    assert made.secret not in outcomes("webhooks", "list").stdout
    logs = orjson.loads(outcomes("webhooks", "deliveries", hook, "--json").stdout)
    assert logs == {"webhook_id": hook, "deliveries": []}
    assert f"webhook {hook} removed" in outcomes("webhooks", "remove", hook).stdout
    assert orjson.loads(outcomes("webhooks", "list", "--json").stdout)["webhooks"] == []
    unknown = outcomes("webhooks", "deliveries", "no-such-hook", ok=False)
    assert unknown.exit_code == 1 and "outcomes: no webhook no-such-hook" in unknown.stderr

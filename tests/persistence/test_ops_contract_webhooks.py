"""The operations contract, the webhooks' part: the webhooks read model (rebuilt as it was
lived), the relay's cursor (forward only), deliveries recorded once per webhook and event, a
claim that a second claimer cannot share until it expires, an attempt settled only by the
claim that holds it. Runs on every store (memory, SQLite, Postgres)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ledger.events import WebhookDisabled, WebhookRegistered
from ledger.persistence.appends import NO_STREAM
from ledger.persistence.base import Store
from ledger.runtime.ledger import Ledger
from ledger.services.audit import verify_all
from ledger.webhook_view import webhook_stream
from ledger.webhooks import Attempt, NewDelivery, Settled
from tests.factories import new, rebuild

T0 = datetime(2026, 12, 2, 6, 0, tzinfo=UTC)


def hook(store: Store, webhook_id: str, account: str = "acme") -> None:
    payload = WebhookRegistered(
        webhook_id=webhook_id, account=account, url="https://h.example/", secret="ol-sealed"
    )
    store.append(webhook_stream(webhook_id), [new(payload)], NO_STREAM)


def delivery(webhook_id: str, event_id: str, position: int) -> NewDelivery:
    return NewDelivery(webhook_id, event_id, f"job-{event_id}", position, "{}", T0)


def attempt(event_id: str, relay: str, status: int | None, number: int = 1) -> Attempt:
    return Attempt("h1", event_id, number, T0, 1.5, status, None if status else "refused", relay)


def test_the_webhooks_read_model_folds_its_stream_and_rebuilds_the_same(
    any_store: Store,
) -> None:
    hook(any_store, "h1")
    hook(any_store, "h2", account="globex")
    disabled = WebhookDisabled(webhook_id="h2", reason="failed for a day")
    any_store.append(webhook_stream("h2"), [new(disabled)], 1)
    with any_store.reading() as reads:
        before = reads.webhooks(None)
        assert [v.webhook_id for v in reads.webhooks("acme")] == ["h1"]
    assert [(v.webhook_id, v.status, v.reason) for v in before] == [
        ("h1", "active", None),
        ("h2", "disabled", "failed for a day"),
    ]
    rebuild(any_store)
    with any_store.reading() as reads:
        assert reads.webhooks(None) == before
    proof = verify_all(Ledger(any_store))  # `outcomes audit verify` proves the table too
    assert proof.ok and proof.read_models.rows_checked["webhooks"] == 2


def test_deliveries_are_recorded_once_and_claimed_by_one_claimer(any_store: Store) -> None:
    hook(any_store, "h1")
    with any_store.transaction() as tx:
        assert tx.webhook_cursor() is None
        tx.set_webhook_cursor(10)
        tx.set_webhook_cursor(5)  # never back
        assert tx.add_deliveries([delivery("h1", "e1", 7), delivery("h1", "e2", 8)]) == 2
        assert tx.add_deliveries([delivery("h1", "e1", 7)]) == 0  # a second relay's copy
    with any_store.reading() as reads:
        assert reads.webhook_cursor() == 10
    lease = T0 + timedelta(seconds=30)
    with any_store.transaction() as tx:
        mine = tx.claim_deliveries(T0, lease, "relay-a", 10)
    with any_store.transaction() as tx:
        theirs = tx.claim_deliveries(T0, lease, "relay-b", 10)
    assert [d.event_id for d in mine] == ["e1", "e2"] and theirs == []
    with any_store.transaction() as tx:  # the claim expired: another relay takes it over
        later = lease + timedelta(seconds=1)
        late = tx.claim_deliveries(later, later + timedelta(seconds=30), "relay-b", 1)
    assert [d.event_id for d in late] == ["e1"]
    with any_store.transaction() as tx:
        assert not tx.finish_attempt(attempt("e1", "relay-a", 204), Settled("delivered", None))
        assert tx.finish_attempt(attempt("e1", "relay-b", 204), Settled("delivered", None))
        retry_at = T0 + timedelta(seconds=5)
        assert tx.finish_attempt(attempt("e2", "relay-a", None), Settled("pending", retry_at))
    with any_store.reading() as reads:
        found = {d.event_id: d for d in reads.deliveries("h1", 10)}
        attempts = reads.delivery_attempts("h1", ["e1", "e2"])
    assert (found["e1"].state, found["e1"].attempts, found["e1"].delivered_at) == (
        "delivered",
        1,
        T0,
    )
    assert (found["e2"].state, found["e2"].next_attempt_at, found["e2"].last_error) == (
        "pending",
        retry_at,
        "refused",
    )
    assert found["e2"].first_attempt_at == T0
    assert [(a.event_id, a.relay) for a in attempts] == [
        ("e1", "relay-a"),  # kept, though its claim had gone
        ("e1", "relay-b"),
        ("e2", "relay-a"),
    ]
    with any_store.transaction() as tx:  # not due before its backoff, nor once delivered
        assert tx.claim_deliveries(T0 + timedelta(seconds=4), lease, "relay-c", 10) == []
        again = tx.claim_deliveries(retry_at, lease + timedelta(1), "relay-c", 10)
    assert [d.event_id for d in again] == ["e2"]


def test_a_claim_skips_the_claimers_busy_webhooks_and_a_claim_let_go_is_free(
    any_store: Store,
) -> None:
    """One webhook's slow receiver never holds a relay's pass (issue 47, M2): the relay
    claims around its busy webhooks, and lets go of what it claimed but will not attempt."""
    hook(any_store, "h1")
    hook(any_store, "h2", account="globex")
    with any_store.transaction() as tx:
        tx.add_deliveries([delivery("h1", "e1", 1), delivery("h2", "e2", 2)])
        tx.add_deliveries([delivery("h1", "e3", 3)])
    lease = T0 + timedelta(seconds=30)
    with any_store.transaction() as tx:
        others = tx.claim_deliveries(T0, lease, "relay-a", 10, exclude={"h1"})
    assert [d.event_id for d in others] == ["e2"]
    with any_store.transaction() as tx:
        mine = tx.claim_deliveries(T0, lease, "relay-a", 10)
        assert [d.event_id for d in mine] == ["e1", "e3"]
        tx.release_claims([("h1", "e3")], "relay-b")  # not theirs to let go
        assert tx.claim_deliveries(T0, lease, "relay-b", 10) == []
        tx.release_claims([("h1", "e3")], "relay-a")
        again = tx.claim_deliveries(T0, lease, "relay-b", 10)
    assert [d.event_id for d in again] == ["e3"]


def test_settled_deliveries_older_than_the_keeping_are_pruned_with_their_attempts(
    any_store: Store,
) -> None:
    """OUTCOMES_WEBHOOK_KEEP_DAYS: settled deliveries (and attempts) created before the cutoff
    go, a batch at a time; pending ones and newer ones stay."""
    hook(any_store, "h1")
    newer = NewDelivery("h1", "e4", "job-e4", 4, "{}", T0 + timedelta(days=8))
    with any_store.transaction() as tx:
        tx.add_deliveries([delivery("h1", f"e{i}", i) for i in (1, 2, 3)] + [newer])
        claimed = tx.claim_deliveries(T0 + timedelta(days=9), T0 + timedelta(days=10), "r", 10)
        assert len(claimed) == 4
        for event_id, settled in (("e1", "delivered"), ("e2", "failed"), ("e4", "delivered")):
            tx.finish_attempt(attempt(event_id, "r", 204), Settled(settled, None))  # type: ignore[arg-type]
    cutoff = T0 + timedelta(days=7)
    with any_store.transaction() as tx:
        assert tx.prune_deliveries(cutoff, 1) == 1  # bounded: one batch
    with any_store.transaction() as tx:
        assert tx.prune_deliveries(cutoff, 10) == 1
        assert tx.prune_deliveries(cutoff, 10) == 0
    with any_store.reading() as reads:
        left = {d.event_id: d.state for d in reads.deliveries("h1", 10)}
        assert left == {"e3": "pending", "e4": "delivered"}  # pending stays, newer stays
        assert [a.event_id for a in reads.delivery_attempts("h1", ["e1", "e2", "e4"])] == ["e4"]

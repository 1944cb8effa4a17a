"""Webhooks' pure parts (docs/webhooks.md): the SSRF rule, the sealed secret, the signature a
receiver verifies with the Standard Webhooks reference library, and the backoff."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from ledger.errors import SecretUnavailableError, WebhookTargetError
from ledger.keyring import Keyring, SecretKey
from ledger.webhook_targets import check_target
from ledger.webhooks import DeliveryPolicy, new_secret, open_secret, seal_secret, signed_headers

PUBLIC = "93.184.215.14"


def resolves_to(*addresses: str):  # type: ignore[no-untyped-def]
    return lambda host, port: list(addresses)


@pytest.mark.parametrize(
    ("url", "addresses", "why"),
    [
        ("http://127.0.0.1/x", ["127.0.0.1"], "loopback"),
        ("http://localhost:8080/", ["127.0.0.1", "::1"], "loopback"),
        ("http://[::1]/", ["::1"], "loopback"),
        ("http://10.1.2.3/", ["10.1.2.3"], "private"),
        ("http://192.168.0.10/", ["192.168.0.10"], "private"),
        ("http://172.16.5.5/", ["172.16.5.5"], "private"),
        ("http://100.64.0.1/", ["100.64.0.1"], "private"),  # shared address space (CGNAT)
        ("http://169.254.169.254/latest/meta-data", ["169.254.169.254"], "link-local"),
        ("http://[fe80::1]/", ["fe80::1"], "link-local"),
        ("http://[::ffff:127.0.0.1]/", ["::ffff:127.0.0.1"], "loopback"),
        ("http://0.0.0.0/", ["0.0.0.0"], "private or reserved"),
        ("http://239.1.1.1/", ["239.1.1.1"], "multicast"),
        # One private address among public ones is enough (a client may pick any).
        ("https://mixed.example/", [PUBLIC, "10.0.0.1"], "private"),
    ],
)
def test_a_url_reaching_inside_is_refused(url: str, addresses: list[str], why: str) -> None:
    with pytest.raises(WebhookTargetError, match=why):
        check_target(url, frozenset(), resolves_to(*addresses))


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://hooks.example/", "http:// or https://"),
        ("file:///etc/passwd", "http:// or https://"),
        ("gopher://x/", "http:// or https://"),
        ("https://user:pw@hooks.example/", "credentials"),
        ("https:///path", "no host"),
        ("https://hooks.example:99999/", "cannot be read"),
        ("https://hooks.example/a b", "no spaces"),
    ],
)
def test_a_url_that_is_no_webhook_url_is_refused(url: str, why: str) -> None:
    with pytest.raises(WebhookTargetError, match=why):
        check_target(url, frozenset(), resolves_to(PUBLIC))


def test_an_unresolvable_host_is_refused() -> None:
    def fails(host: str, port: int) -> list[str]:
        raise OSError("Name or service not known")

    with pytest.raises(WebhookTargetError, match="does not resolve"):
        check_target("https://nowhere.invalid/", frozenset(), fails)


def test_public_hosts_and_allowed_hosts_pass() -> None:
    # A public host answers the address checked: the delivery connects there, not to a
    # second resolution (DNS rebinding).
    assert check_target("https://hooks.example/outcomes", frozenset(), resolves_to(PUBLIC)) == (
        PUBLIC
    )
    # Allowed by name: not even resolved, and connected to by name.
    allowed = frozenset({"localhost"})
    assert check_target("http://localhost:9000/", allowed, resolves_to("127.0.0.1")) is None
    assert check_target("http://[::1]:9000/", frozenset({"::1"}), resolves_to("::1")) is None


KEYRING = Keyring([SecretKey("k1", bytes(range(32)))])


def test_the_secret_is_kept_sealed_bound_to_its_webhook() -> None:
    secret = new_secret()
    assert secret.startswith("whsec_")
    stored = seal_secret(secret, "hook-1", KEYRING)
    assert secret not in stored and secret.removeprefix("whsec_") not in stored
    assert open_secret(stored, "hook-1", KEYRING) == secret
    with pytest.raises(SecretUnavailableError):
        open_secret(stored, "hook-2", KEYRING)  # a box moved to another webhook
    with pytest.raises(SecretUnavailableError, match="no secrets key"):
        open_secret(stored, "hook-1", None)


BODY = '{"job_id":"j-1","status":"succeeded"}'


def test_the_reference_library_verifies_what_the_ledger_signs() -> None:
    secret = new_secret()
    headers = signed_headers(secret, "evt-1", BODY, datetime.now(UTC))
    assert Webhook(secret).verify(BODY, headers) == {"job_id": "j-1", "status": "succeeded"}
    assert headers["webhook-id"] == "evt-1"


def test_a_forged_altered_or_replayed_delivery_is_rejected_by_the_receiver() -> None:
    secret = new_secret()
    receiver = Webhook(secret)
    headers = signed_headers(secret, "evt-1", BODY, datetime.now(UTC))
    forged = signed_headers(new_secret(), "evt-1", BODY, datetime.now(UTC))
    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        receiver.verify(BODY, forged)  # signed with another secret
    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        receiver.verify(BODY.replace("succeeded", "failed"), headers)  # body altered
    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        receiver.verify(BODY, headers | {"webhook-id": "evt-2"})  # another message's id
    stale = signed_headers(secret, "evt-1", BODY, datetime.now(UTC) - timedelta(minutes=10))
    with pytest.raises(WebhookVerificationError, match="too old"):
        receiver.verify(BODY, stale)  # a replay, signed right but long ago
    restamped = headers | {"webhook-timestamp": stale["webhook-timestamp"]}
    with pytest.raises(WebhookVerificationError):
        receiver.verify(BODY, restamped)


def test_the_backoff_doubles_up_to_its_cap() -> None:
    policy = DeliveryPolicy(backoff_s=5.0, backoff_max_s=60.0)
    assert [policy.delay(n) for n in range(1, 7)] == [5.0, 10.0, 20.0, 40.0, 60.0, 60.0]


def test_the_webhook_settings_are_read_and_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from ledger.errors import ConfigurationError
    from ledger.services.webhook_relay import policy_from
    from ledger.settings import load_settings

    monkeypatch.setenv("OUTCOMES_WEBHOOK_ALLOW_HOSTS", " Receiver.internal, [::1] ,127.0.0.1")
    monkeypatch.setenv("OUTCOMES_WEBHOOK_RETRY_FOR_S", "3")
    policy = policy_from(load_settings())
    assert policy.allow_hosts == {"receiver.internal", "::1", "127.0.0.1"}
    assert (policy.retry_for_s, policy.backoff_s, policy.timeout_s) == (3.0, 5.0, 10.0)
    monkeypatch.setenv("OUTCOMES_WEBHOOK_ALLOW_HOSTS", "https://receiver.internal/")
    with pytest.raises(ConfigurationError, match="OUTCOMES_WEBHOOK_ALLOW_HOSTS"):
        load_settings()
    monkeypatch.delenv("OUTCOMES_WEBHOOK_ALLOW_HOSTS")
    monkeypatch.setenv("OUTCOMES_WEBHOOK_RETRY_FOR_S", "0")
    with pytest.raises(ConfigurationError, match="OUTCOMES_WEBHOOK_RETRY_FOR_S"):
        load_settings()

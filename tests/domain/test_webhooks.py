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
HIDDEN = "does not resolve to public addresses only"


def resolves_to(*addresses: str):  # type: ignore[no-untyped-def]
    return lambda host, port: list(addresses)


@pytest.mark.parametrize(
    ("url", "addresses", "why"),
    [
        ("http://127.0.0.1/x", ["127.0.0.1"], "loopback"),
        ("http://localhost:8080/", ["127.0.0.1", "::1"], HIDDEN),
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
        ("https://mixed.example/", [PUBLIC, "10.0.0.1"], HIDDEN),
        # IPv6 forms that carry an IPv4 address are judged by it (issue 47, Lows).
        ("http://[64:ff9b::a00:1]/", [], "private"),  # NAT64 to 10.0.0.1
        ("http://[64:ff9b::7f00:1]/", [], "loopback"),  # NAT64 to 127.0.0.1
        ("http://[64:ff9b::a9fe:a9fe]/", [], "link-local"),  # NAT64 to 169.254.169.254
        ("http://[64:ff9b:1::808:808]/", [], "private or reserved"),  # a network's own NAT64
        ("http://[2002:a00:1::]/", [], "private"),  # 6to4 of 10.0.0.1
        ("http://[2002:7f00:1::1]/", [], "loopback"),  # 6to4 of 127.0.0.1
        ("http://[::10.0.0.1]/", [], "private"),  # IPv4-compatible
        ("http://[::127.0.0.1]/", [], "loopback"),
        ("http://[::ffff:a9fe:a9fe]/", [], "link-local"),  # IPv4-mapped, hex
        ("http://[2001:0:4136:e378:8000:63bf:f5ff:fffe]/", [], "private"),  # Teredo, 10.0.0.1
        ("https://nat64.example/", ["64:ff9b::a00:1"], HIDDEN),  # a name resolving to one
    ],
)
def test_a_url_reaching_inside_is_refused(url: str, addresses: list[str], why: str) -> None:
    with pytest.raises(WebhookTargetError, match=why) as refused:
        check_target(url, frozenset(), resolves_to(*addresses))
    if why == HIDDEN:  # a name: what it resolves to is not said
        assert not any(a in str(refused.value) for a in addresses)
        assert "private" not in str(refused.value) and "loopback" not in str(refused.value)


def test_a_refused_name_reveals_neither_its_address_nor_whether_it_resolves() -> None:
    """The account hears the same for an internal name and for none: nothing of the
    network's own DNS."""

    def fails(host: str, port: int) -> list[str]:
        raise OSError("Name or service not known")

    internal = ""
    for addresses in (["10.20.30.40"], ["fd00::1234"], ["127.0.0.1"], ["169.254.169.254"]):
        with pytest.raises(WebhookTargetError) as refused:
            check_target("https://db.internal/", frozenset(), resolves_to(*addresses))
        assert addresses[0] not in str(refused.value)
        internal = internal or str(refused.value)
        assert str(refused.value) == internal
    with pytest.raises(WebhookTargetError) as nowhere:
        check_target("https://db.internal/", frozenset(), fails)
    assert str(nowhere.value) == internal


@pytest.mark.parametrize(
    "address",
    ["64:ff9b::5db8:d70e", "2002:5db8:d70e::1", "::ffff:93.184.215.14", "2606:2800:220:1::1"],
)
def test_an_ipv6_address_reaching_a_public_ipv4_one_passes(address: str) -> None:
    assert check_target(f"https://[{address}]/", frozenset(), resolves_to()) == address


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

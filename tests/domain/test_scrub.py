"""The scrub (ledger/scrub.py): the job's declared secrets as known secrets, credential shapes
robust to passwords holding `@`, `;`, `,` or spaces, a bound on the output, and no beginning of
a secret left where the bound cut it. Speed is measured by `python -m bench.scrub`, not here."""

from __future__ import annotations

import re
import string
from collections.abc import Callable
from urllib.parse import quote, quote_plus, urlencode

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ledger.scrub import MAX_DETAIL, REDACTED, known_secrets, scrub, scrub_value

PASSWORD = "p@ss;word hunter2"


def test_declared_secrets_are_known_in_every_quoting() -> None:
    secrets = known_secrets([PASSWORD, "4821", "9f3a", True])
    assert {PASSWORD, "p%40ss%3Bword%20hunter2", "p%40ss%3Bword+hunter2", "4821", "9f3a"} <= set(
        secrets
    )
    assert "True" not in secrets  # a flag is no secret's text
    assert [len(s) for s in secrets] == sorted((len(s) for s in secrets), reverse=True)
    text = f"login failed for {PASSWORD} ({PASSWORD!r}, {'p%40ss%3Bword%20hunter2'}) pin 4821"
    shown = scrub(text, secrets)
    assert "hunter2" not in shown and "p@ss" not in shown and "4821" not in shown
    assert shown.startswith("login failed for [REDACTED] ('[REDACTED]', [REDACTED]) pin")


@pytest.mark.parametrize("secret", ["a+b/c=d&e f", "p@ss/w0rd?x=1#frag", "ünï/cødé secret"])
@pytest.mark.parametrize(
    "encode",
    [
        quote,  # its default: safe="/"
        lambda s: quote(s, safe=""),
        quote_plus,
        lambda s: quote_plus(s, safe="/"),
        lambda s: urlencode({"q": s}).removeprefix("q="),
        lambda s: re.sub(r"%[0-9A-F]{2}", lambda m: m[0].lower(), quote(s)),  # %2f, not %2F
    ],
    ids=["quote", "quote-safe-none", "quote_plus", "quote_plus-safe-slash", "urlencode", "hex"],
)
def test_a_declared_secret_is_known_as_a_url_quotes_it(
    secret: str, encode: Callable[[str], str]
) -> None:
    encoded = encode(secret)
    assert encoded != secret
    secrets = known_secrets([secret])
    text = f"GET https://api.example.com/v1/search?q={encoded}&page=2 failed: 401"
    shown = scrub(text, secrets)
    assert shown == f"GET https://api.example.com/v1/search?q={REDACTED}&page=2 failed: 401"


def test_a_short_declared_secret_is_replaced_only_where_it_stands_alone() -> None:
    shown = scrub("pin 123 refused; order 1234 and a123 are not it", known_secrets(["123"]))
    assert shown == "pin [REDACTED] refused; order 1234 and a123 are not it"


def test_secret_bytes_are_known_as_python_prints_them() -> None:
    secret = "pässwort-42"
    shown = scrub(f"key {secret.encode()!r} rejected", known_secrets([secret]))
    assert shown == "key b'[REDACTED]' rejected"


def test_an_answer_loses_its_secrets_and_nothing_else() -> None:
    answer = {"note": f"token {PASSWORD} set", "items": [PASSWORD, 3, "x" * 3000], PASSWORD: 1}
    shown = scrub_value(answer, known_secrets([PASSWORD]))
    assert shown == {
        "note": "token [REDACTED] set",
        "items": [REDACTED, 3, "x" * 3000],
        REDACTED: 1,
    }
    assert scrub_value(answer, ()) is answer


@pytest.mark.parametrize(
    "text",
    [
        f"postgresql://admin:{PASSWORD}@db.internal:5432/ledger refused",
        "redis://:p@ss,w;rd@cache:6379/0 refused",
        "https://ghp_notashape@github.com/org/repo.git",
        f"password={PASSWORD}",
        f'{{"password": "{PASSWORD}"}}',
        f"{{'client_secret': '{PASSWORD}'}}",
        "DB_PASSWORD=p@ss;word,x",
        "api-key: p@ss;word,x",
        "Authorization: Bearer abcdefgh.ijklmnop",
    ],
)
def test_credential_shapes_are_hidden_whole(text: str) -> None:
    shown = scrub(text)
    assert REDACTED in shown
    for piece in ("p@ss", ";word", "w;rd", "notashape", "ijklmnop", "admin:", ",x"):
        assert piece not in shown, shown
    if "hunter2" in shown:  # an unquoted value ends at a space: nothing tells where it ends
        assert shown == "password=[REDACTED] hunter2"


def test_hosts_and_prose_around_credentials_stay() -> None:
    shown = scrub(f"postgresql://admin:{PASSWORD}@db.internal:5432/ledger refused")
    assert shown == "postgresql://[REDACTED]@db.internal:5432/ledger refused"
    prose = "fetching https://example.com/page failed, write to ops@example.com"
    assert scrub(prose) == prose


def test_the_output_is_bounded_and_says_it_was_cut() -> None:
    shown = scrub("x" * 300_000)
    assert len(shown) == MAX_DETAIL + 1 and shown.endswith("…")
    assert scrub("short") == "short"


@pytest.mark.parametrize("before", [MAX_DETAIL - 5, MAX_DETAIL + 100, MAX_DETAIL + 250])
def test_a_secret_cut_by_the_bound_leaves_no_beginning(before: int) -> None:
    secret = "Zq9vX4pLm-" * 40  # 400 characters: starts before the cut, ends after it
    shown = scrub("x" * before + secret + "y" * 5000, known_secrets({"k": secret}))
    assert "Zq9v" not in shown and len(shown) <= MAX_DETAIL + 1


def test_a_url_cut_before_its_at_sign_is_hidden_to_the_cut() -> None:
    # The known secret first shrinks to the marker: the URL near the cut comes into view.
    known = "k" * 1000
    text = known + "x" * (MAX_DETAIL - 870) + "amqp://guest:" + "s" * 5000 + "@rabbit"
    shown = scrub(text, known_secrets({"k": known}))
    assert "amqp://" in shown and "guest" not in shown and "sss" not in shown


def test_controls_and_lone_surrogates_become_storable() -> None:
    assert scrub("a\x00b\ud800c\td\ne") == "a\ufffdb?c\td\ne"


SAFE = string.ascii_lowercase + string.digits + "@;:,/ .-_"  # not the marker's own letters


@settings(max_examples=200, deadline=None)
@given(
    secret=st.text(SAFE, min_size=4, max_size=300),
    before=st.text(SAFE, max_size=2600),
    after=st.text(SAFE, max_size=300),
)
def test_no_argument_value_survives_anywhere_in_the_text(
    secret: str, before: str, after: str
) -> None:
    assume(secret not in before + after)
    shown = scrub(before + secret + after, known_secrets({"arg": secret}))
    assert secret not in shown

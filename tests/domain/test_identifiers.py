"""What callers name things with (ledger/identifiers.py): tool names, idempotency keys and
accounts hold no control, bidirectional or zero-width character, and every name pattern is a
full match (`$` would also match before a final newline: `acme\\n` is not `acme`)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger import identifiers
from ledger.access import ACCOUNT_PATTERN, validate_account
from ledger.brakes import parse_scope
from ledger.codes import Code
from ledger.decisions import JobRequest
from ledger.error_info import ErrorInfo
from ledger.errors import InvalidEventError, InvalidScopeError, TokenError, UnsafeTextError
from ledger.keyring import KEY_ID
from ledger.settings import MODULE, QUEUE
from ledger.tools import TOOL_NAME
from mcp_server.names import tool_name
from mcp_server.options import KEY_ARG, options_of

UNSAFE = [
    "\u202e",  # RIGHT-TO-LEFT OVERRIDE
    "\u202a",
    "\u2066",  # LEFT-TO-RIGHT ISOLATE
    "\u2069",
    "\u200e",  # LEFT-TO-RIGHT MARK
    "\u200f",
    "\u061c",  # ARABIC LETTER MARK
    "\u200b",  # ZERO WIDTH SPACE
    "\u200c",
    "\u200d",
    "\u2060",  # WORD JOINER
    "\ufeff",  # ZERO WIDTH NO-BREAK SPACE (a BOM)
    "\x00",
    "\n",
    "\x1f",
    "\x7f",
    "\x85",  # NEXT LINE (C1)
    "\x9f",
    "\u2028",  # LINE SEPARATOR
]
SAFE = ["plan-T-1", "a.b_c", "ключ-1", "clé:42", "日本語", "a b", "emoji-\U0001f600", "x\u00a0y"]


@pytest.mark.parametrize("char", UNSAFE)
def test_each_unsafe_character_is_named_by_code_point(char: str) -> None:
    text = f"plan{char}T-1"
    point = f"U+{ord(char):04X}"
    assert identifiers.unsafe_character(text) == (4, identifiers.describe(char))
    reason = identifiers.problem("the idempotency key", text)
    assert reason is not None and f"holds {point}" in reason and "at character 5" in reason
    assert text not in reason  # never echoes what was sent
    with pytest.raises(UnsafeTextError, match=re.escape(point)) as raised:
        identifiers.check("the idempotency key", text)
    assert isinstance(raised.value, InvalidEventError)  # answered as invalid input everywhere
    assert not re.fullmatch(identifiers.PATTERN, text)


def test_a_bidi_override_is_described_by_its_name_and_kind() -> None:
    described = identifiers.describe("\u202e")
    assert described == "U+202E (RIGHT-TO-LEFT OVERRIDE, a bidirectional control)"
    assert identifiers.describe("\x85") == "U+0085 (a control character)"
    assert "ZERO WIDTH SPACE" in identifiers.describe("\u200b")


@pytest.mark.parametrize("text", SAFE)
def test_visible_text_passes(text: str) -> None:
    assert identifiers.unsafe_character(text) is None
    assert identifiers.check("the tool name", text) == text
    assert re.fullmatch(identifiers.PATTERN, text)


@given(st.text(min_size=1, max_size=12))
def test_the_schema_pattern_is_the_same_rule_as_the_check(text: str) -> None:
    assert (re.fullmatch(identifiers.PATTERN, text) is not None) == (
        identifiers.problem("x", text) is None
    )


@pytest.mark.parametrize("char", ["\u202e", "\u200b", "\x85", "\ufeff", "\x00"])
def test_a_job_request_refuses_such_a_tool_name_or_key(char: str) -> None:
    with pytest.raises(UnsafeTextError, match=f"the tool name holds U\\+{ord(char):04X}"):
        JobRequest(f"tracker.read_issue{char}", {})
    with pytest.raises(UnsafeTextError, match=f"the idempotency key holds U\\+{ord(char):04X}"):
        JobRequest("tracker.read_issue", {}, idempotency_key=f"plan{char}")
    assert JobRequest("tracker.read_issue", {}, idempotency_key="plan-1").idempotency_key


@pytest.mark.parametrize("account", ["acme\n", "acme\r\n", "acme\u202e", "ac\u200bme", "\nacme"])
def test_an_account_is_a_full_match(account: str) -> None:
    with pytest.raises(TokenError, match=r"U\+[0-9A-F]{4}"):
        validate_account(account)
    assert validate_account("acme") == "acme"
    assert not re.match(ACCOUNT_PATTERN, "acme\n")  # whoever matches with it (the console)


@pytest.mark.parametrize(
    ("pattern", "good"),
    [
        (TOOL_NAME, "tracker.read_issue"),
        (re.compile(ACCOUNT_PATTERN), "acme"),
        (KEY_ID, "k1"),
        (MODULE, "examples.seed_tools"),
        (QUEUE, "outcomes"),
    ],
)
def test_no_name_pattern_takes_a_trailing_newline(pattern: re.Pattern[str], good: str) -> None:
    assert pattern.fullmatch(good)
    assert not pattern.fullmatch(good + "\n")
    if pattern.pattern.startswith("\\A"):  # safe with match() too
        assert not pattern.match(good + "\n")


def test_mcp_names_and_brake_scopes_take_no_trailing_newline() -> None:
    assert tool_name("tracker__read_issue") == "tracker.read_issue"
    assert tool_name("tracker__read_issue\n") is None
    with pytest.raises(InvalidScopeError):
        parse_scope("account:ac\nme")
    assert parse_scope(" account:acme\n") == "account:acme"  # surrounding space is trimmed


@pytest.mark.parametrize("char", ["\u202e", "\u2066", "\u200d", "\x85"])
def test_an_mcp_idempotency_key_with_such_a_character_is_a_typed_error(char: str) -> None:
    refused = options_of({KEY_ARG: f"plan{char}1", "text": "x"})
    assert isinstance(refused, ErrorInfo)
    assert refused.code is Code.INPUT_INVALID
    assert f"U+{ord(char):04X}" in refused.message and "nothing was submitted" in refused.message
    assert KEY_ARG in (refused.fix or "")
    accepted = options_of({KEY_ARG: "plan-1"})
    assert not isinstance(accepted, ErrorInfo) and accepted.key == "plan-1"

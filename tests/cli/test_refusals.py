"""Options that would quietly mean something else are refused with a one-line reason."""

from __future__ import annotations

import orjson
import pytest

from tests.plugins.cli import Invoke


def _token_count(outcomes: Invoke) -> int:
    return len(orjson.loads(outcomes("tokens", "list", "--json").stdout)["tokens"])


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        (["--tools", ""], "names no tool"),
        (["--tools", " , "], "names no tool"),
        (["--tools", "nobody.has_it"], "unknown tools: nobody.has_it"),
        (["--account", "*"], "belong to one account"),
    ],
)
def test_tokens_create_refuses_what_would_widen_a_token(
    outcomes: Invoke, options: list[str], reason: str
) -> None:
    args = ["tokens", "create", "--role", "agent", *options]
    if "--account" not in options:
        args += ["--account", "acme"]
    result = outcomes(*args, ok=False)
    assert result.exit_code == 1
    assert result.stderr.startswith("outcomes: ") and reason in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert _token_count(outcomes) == 0


def test_tokens_create_knows_the_tools_of_outcomes_tools(
    outcomes: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OUTCOMES_TOOLS", "examples.seed_tools")
    outcomes(
        "tokens", "create", "--account", "acme", "--role", "agent", "--tools", "tracker.read_issue"
    )
    outcomes(
        "tokens",
        "create",
        "--account",
        "acme",
        "--role",
        "agent",
        "--tools",
        "nobody.has_it",
        "--allow-unknown-tools",
    )
    assert _token_count(outcomes) == 2


@pytest.mark.parametrize(
    "args",
    [
        *[["reconcile", "--once", "--interval", v] for v in ("nan", "inf", "-inf", "1e400")],
        ["reconcile", "--once", "--interval", "0"],
        ["serve", "--port", "70000"],
        ["jobs", "list", "--after", str(2**63)],
        ["audit", "events", "--after", str(2**63)],
    ],
)
def test_a_numeric_option_out_of_range_is_a_usage_error(outcomes: Invoke, args: list[str]) -> None:
    result = outcomes(*args, ok=False)
    assert result.exit_code == 2
    assert f"Error: Invalid value for '{args[-2]}'" in result.stderr


@pytest.mark.parametrize("value", ["nan", "inf", "-3"])
def test_a_bad_setting_is_a_one_line_error(
    outcomes: Invoke, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("OUTCOMES_LEASE_S", value)
    result = outcomes("reconcile", "--once", ok=False)
    assert result.exit_code == 1
    assert result.stderr.startswith("outcomes: OUTCOMES_LEASE_S must be")
    assert len(result.stderr.strip().splitlines()) == 1

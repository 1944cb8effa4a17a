"""Settings from the environment: every value checked once, a one-line ConfigurationError."""

from __future__ import annotations

import pytest

from ledger.errors import ConfigurationError
from ledger.settings import load_settings

OUTCOMES = (
    "OUTCOMES_DATABASE_URL",
    "OUTCOMES_BROKER_URL",
    "OUTCOMES_TOOLS",
    "OUTCOMES_QUEUE",
    "OUTCOMES_LEASE_S",
    "OUTCOMES_DISPATCH_TIMEOUT_S",
    "OUTCOMES_REDIS_VISIBILITY_S",
    "OUTCOMES_PREFETCH",
    "OUTCOMES_TASK_EVENTS",
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OUTCOMES:
        monkeypatch.delenv(name, raising=False)


def test_defaults() -> None:
    settings = load_settings()
    assert (settings.lease_s, settings.dispatch_timeout_s, settings.queue) == (30, 30, "outcomes")
    assert (settings.redis_visibility_s, settings.prefetch, settings.tools) == (3600, 4, ())
    assert settings.task_events is False


def test_good_values_are_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "OUTCOMES_LEASE_S": "0.5",
        "OUTCOMES_DISPATCH_TIMEOUT_S": "86400",
        "OUTCOMES_REDIS_VISIBILITY_S": "2",
        "OUTCOMES_PREFETCH": "1",
        "OUTCOMES_QUEUE": "outcomes-test.1",
        "OUTCOMES_TOOLS": "examples.seed_tools, tests.tools",
        "OUTCOMES_TASK_EVENTS": "1",
    }.items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    assert (settings.lease_s, settings.dispatch_timeout_s) == (0.5, 86400)
    assert (settings.redis_visibility_s, settings.prefetch) == (2, 1)
    assert settings.tools == ("examples.seed_tools", "tests.tools")
    assert settings.task_events is True


@pytest.mark.parametrize(("value", "expected"), [("0", False), ("off", False), ("TRUE", True)])
def test_task_events_is_a_flag(monkeypatch: pytest.MonkeyPatch, value: str, expected: bool) -> None:
    monkeypatch.setenv("OUTCOMES_TASK_EVENTS", value)
    assert load_settings().task_events is expected


@pytest.mark.parametrize(
    ("name", "value"),
    [
        *[
            (name, value)
            for name in ("OUTCOMES_LEASE_S", "OUTCOMES_DISPATCH_TIMEOUT_S")
            for value in ("nan", "NaN", "inf", "-inf", "1e400", "-3", "0", "86401", "soon")
        ],
        ("OUTCOMES_REDIS_VISIBILITY_S", "0"),
        ("OUTCOMES_REDIS_VISIBILITY_S", "1.5"),
        ("OUTCOMES_REDIS_VISIBILITY_S", "99999999999999999999999"),
        ("OUTCOMES_PREFETCH", "0"),
        ("OUTCOMES_PREFETCH", "-1"),
        ("OUTCOMES_PREFETCH", "many"),
        ("OUTCOMES_QUEUE", "two words"),
        ("OUTCOMES_QUEUE", "x" * 201),
        ("OUTCOMES_TOOLS", "examples.seed_tools,..relative"),
        ("OUTCOMES_TOOLS", "a/b"),
        ("OUTCOMES_TASK_EVENTS", "2"),
        ("OUTCOMES_TASK_EVENTS", "maybe"),
    ],
)
def test_a_bad_value_is_a_one_line_configuration_error(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError) as info:
        load_settings()
    assert str(info.value).startswith(name) and "\n" not in str(info.value)

"""Settings from the environment: every value checked once, a one-line ConfigurationError."""

from __future__ import annotations

import os

import pytest

from ledger.errors import ConfigurationError
from ledger.settings import load_settings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every OUTCOMES_ setting unset: each test sets what it is about."""
    for name in [n for n in os.environ if n.startswith("OUTCOMES_")]:
        monkeypatch.delenv(name)


def test_defaults() -> None:
    settings = load_settings()
    assert (settings.lease_s, settings.dispatch_timeout_s, settings.queue) == (30, 5, "outcomes")
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


# --- logs and metrics ---------------------------------------------------------------------


def test_defaults_are_text_logs_and_a_closed_metrics_route() -> None:
    settings = load_settings()
    assert (settings.log_format, settings.metrics_open) == ("text", False)
    assert (settings.metrics_port, settings.metrics_host) == (None, "127.0.0.1")


def test_good_log_and_metrics_values_are_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTCOMES_LOG_FORMAT", " JSON ")
    monkeypatch.setenv("OUTCOMES_METRICS_OPEN", "1")
    monkeypatch.setenv("OUTCOMES_METRICS_PORT", "9464")
    monkeypatch.setenv("OUTCOMES_METRICS_HOST", "0.0.0.0")
    settings = load_settings()
    assert (settings.log_format, settings.metrics_open) == ("json", True)
    assert (settings.metrics_port, settings.metrics_host) == (9464, "0.0.0.0")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("OUTCOMES_LOG_FORMAT", "yaml"),
        ("OUTCOMES_LOG_FORMAT", "json,text"),
        ("OUTCOMES_METRICS_OPEN", "maybe"),
        ("OUTCOMES_METRICS_OPEN", "2"),
        ("OUTCOMES_METRICS_PORT", "0"),
        ("OUTCOMES_METRICS_PORT", "65536"),
        ("OUTCOMES_METRICS_PORT", "http"),
    ],
)
def test_a_bad_log_or_metrics_value_is_a_one_line_configuration_error(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError) as info:
        load_settings()
    assert str(info.value).startswith(name) and "\n" not in str(info.value)

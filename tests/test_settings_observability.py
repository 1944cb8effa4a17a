"""The logs' and metrics' settings: checked like every other (a one-line ConfigurationError)."""

from __future__ import annotations

import pytest

from ledger.errors import ConfigurationError
from ledger.settings import load_settings

NAMES = (
    "OUTCOMES_LOG_FORMAT",
    "OUTCOMES_METRICS_OPEN",
    "OUTCOMES_METRICS_PORT",
    "OUTCOMES_METRICS_HOST",
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in NAMES:
        monkeypatch.delenv(name, raising=False)


def test_defaults_are_text_logs_and_a_closed_metrics_route() -> None:
    settings = load_settings()
    assert (settings.log_format, settings.metrics_open) == ("text", False)
    assert (settings.metrics_port, settings.metrics_host) == (None, "127.0.0.1")


def test_good_values_are_taken(monkeypatch: pytest.MonkeyPatch) -> None:
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
def test_a_bad_value_is_a_one_line_configuration_error(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError) as info:
        load_settings()
    assert str(info.value).startswith(name) and "\n" not in str(info.value)

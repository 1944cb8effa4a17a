"""The Celery app follows Celery's conventions: remote control on (unique node names keep two
workers on one host apart), exchanges named after the queue, task events behind a setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.settings import load_settings
from workers.app import make_celery


@pytest.fixture(autouse=True)
def embedded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # the embedded broker's folder
    for name in ("OUTCOMES_BROKER_URL", "OUTCOMES_TASK_EVENTS", "OUTCOMES_TOOLS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OUTCOMES_QUEUE", "ops-q")


def test_remote_control_is_on_and_scoped_to_the_queue() -> None:
    app = make_celery(load_settings())
    assert app.conf.worker_enable_remote_control is True
    assert (app.conf.control_exchange, app.conf.event_exchange) == ("ops-q", "ops-q.events")
    assert (app.conf.worker_send_task_events, app.conf.task_send_sent_event) == (False, False)


def test_task_events_for_flower_are_behind_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTCOMES_TASK_EVENTS", "1")
    app = make_celery(load_settings())
    assert (app.conf.worker_send_task_events, app.conf.task_send_sent_event) == (True, True)


def test_no_prefetch_reduction_after_a_reconnect() -> None:
    """Celery's restore of a reduced prefetch rides on each ack, which the batched runner
    makes from its own threads: off, so no `basic.qos` runs off the event loop."""
    app = make_celery(load_settings())
    assert app.conf.worker_enable_prefetch_count_reduction is False

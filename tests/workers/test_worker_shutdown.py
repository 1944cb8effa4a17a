"""A worker notices a shutdown request within a tick, whatever its pool: the event loop's
poll is bounded by a repeating timer (kombu's hub otherwise waits up to 10 s when nothing is
due, and a threads pool has no pipe to wake it)."""

from __future__ import annotations

from types import SimpleNamespace

from kombu.asynchronous import Hub

from workers.shutdown import TICK_S, PromptShutdown


def test_the_hub_polls_no_longer_than_a_tick() -> None:
    hub = Hub()
    try:
        hub.call_repeatedly(30.0, lambda: None)  # a slow timer alone lets the poll sleep long
        assert hub.fire_timers() > TICK_S
        PromptShutdown.start(PromptShutdown.__new__(PromptShutdown), SimpleNamespace(hub=hub))
        assert hub.fire_timers() <= TICK_S
    finally:
        hub.close()


def test_a_pool_without_a_hub_is_left_alone() -> None:
    PromptShutdown.start(PromptShutdown.__new__(PromptShutdown), SimpleNamespace(hub=None))


def test_every_worker_process_has_the_step() -> None:
    from workers.main import app

    assert PromptShutdown in app.steps["worker"]

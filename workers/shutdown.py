"""A worker stops promptly when asked (SIGTERM, `docker stop`, `celery control shutdown`).

Celery's event loop notices a shutdown request only between two polls, and kombu's hub polls
for up to 10 s when nothing else is due. A prefork pool's pipes wake it sooner; a threads
pool (our default) has no such file descriptors, so a warm shutdown waited ~10 s, exactly
`docker stop`'s grace before SIGKILL. A timer that fires every TICK_S bounds that wait.
"""

from __future__ import annotations

from typing import Any

from celery import bootsteps

TICK_S = 0.5


def _tick() -> None:
    """Nothing to do: firing at all is the point (the loop then checks for a shutdown)."""


class PromptShutdown(bootsteps.StartStopStep):  # type: ignore[misc]  # Celery is untyped
    requires = ("celery.worker.components:Hub",)

    def start(self, worker: Any) -> None:
        hub = getattr(worker, "hub", None)
        if hub is not None:  # None: a pool without the event loop (solo), already prompt
            hub.call_repeatedly(TICK_S, _tick)

"""Stopping a long-running command kindly: the first SIGTERM or SIGINT asks it to stop once
what is under way is finished (a reconcile pass and its report, a digest being written); a
second one stops it at once, as Ctrl-C always has."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

WANTED = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def stop_on_signals(stop: threading.Event | None = None) -> Iterator[threading.Event]:
    """The event the first signal sets; the second raises KeyboardInterrupt. Only the main
    thread may install handlers, so this is for a command's own loop."""
    asked = stop or threading.Event()

    def force(_sig: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    def ask(_sig: int, _frame: FrameType | None) -> None:
        # Set from another thread: the handler runs on the main thread, which may be inside
        # the event's own wait holding its (not reentrant) lock; setting it here could hang.
        threading.Thread(target=asked.set, name="stop requested", daemon=True).start()
        for sig in WANTED:
            signal.signal(sig, force)

    before = {sig: signal.signal(sig, ask) for sig in WANTED}
    try:
        yield asked
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)

"""Start-up's objects out of the garbage collector's way.

A process of ours holds a large heap of long-lived objects once it has started (modules, the
app and its routes, pydantic's and SQLAlchemy's schemas). Every full (generation 2) collection
walks all of them: under sixteen agents the API and the workers paused 100 to 275 ms at a time
for it, and each pause stalled every call in flight (docs/performance.md, "Where sixteen
agents' tail goes"). `gc.freeze()` moves what exists now into a permanent generation that
collections skip; what is made later is collected as before, so nothing leaks that did not.
"""

from __future__ import annotations

import gc

_done = False  # once a process: a second start (tests start many apps) finds nothing to add


def freeze_startup_heap() -> None:
    """Collect once (start-up's garbage goes), then freeze what is left. Call once a process
    has started and before it serves; later calls do nothing."""
    global _done
    if _done:
        return
    _done = True
    gc.collect()
    gc.freeze()

"""The dispatch port: how the core hands a job id to whatever runs jobs (Celery, in
`workers.dispatch`). Only the id travels: arguments and secrets stay in the ledger.

Submit, the executor (a retry) and the reconciler (a re-dispatch) all dispatch through it. A
dispatcher that fails raises `DispatchError`; nothing is lost, because the reconciler
re-dispatches an accepted job that never started.
"""

from __future__ import annotations

from typing import Protocol


class Dispatcher(Protocol):
    def dispatch(self, job_id: str, delay_s: float = 0.0) -> None: ...

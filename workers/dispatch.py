"""The dispatch port (`ledger.dispatch.Dispatcher`) on Celery: hands job ids to the broker
(only the id: arguments and secrets stay in the ledger)."""

from __future__ import annotations

from celery import Celery
from kombu.exceptions import KombuError, OperationalError

from ledger.errors import DispatchError
from workers.app import EXECUTE_TASK


class CeleryDispatcher:
    def __init__(self, app: Celery, queue: str) -> None:
        self.app = app
        self.queue = queue

    def dispatch(self, job_id: str, delay_s: float = 0.0) -> None:
        try:
            self.app.send_task(
                EXECUTE_TASK,
                args=[job_id],
                queue=self.queue,
                countdown=delay_s if delay_s > 0 else None,
            )
        except (KombuError, OperationalError, OSError) as exc:
            raise DispatchError(f"broker refused job {job_id}: {type(exc).__name__}") from exc


def dispatcher_from_settings() -> CeleryDispatcher:
    """The dispatcher the API, the reconciler and the CLI use (one Celery app per process)."""
    from ledger.settings import load_settings
    from workers.app import make_celery

    settings = load_settings()
    return CeleryDispatcher(make_celery(settings), settings.queue)

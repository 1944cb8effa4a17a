"""One execute message in the batched runner's hands (`workers.batched`): its job id, its
ack, and the shape of a Celery request where `inspect active` and the counters look."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from workers.app import EXECUTE_TASK

log = logging.getLogger(__name__)


class Delivery:
    """One execute message in the runner's hands; shaped like a Celery request where
    `inspect active` and the worker's counters look at one."""

    name = EXECUTE_TASK

    def __init__(
        self, message: Any, job_id: str, ack: Callable[..., Any], hostname: str, errors: Any
    ) -> None:
        self.message = message
        self._errors = errors  # the connection's errors, which the ack logs rather than raises
        self.id: str = message.headers.get("id") or ""
        self.job_id = job_id
        self._ack = ack
        self.hostname = hostname
        self.time_start: float | None = None
        self.holds_slot = False  # taken for a tool that has not returned yet

    def info(self, safe: bool = False) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "args": [self.job_id],
            "kwargs": {},
            "type": self.name,
            "hostname": self.hostname,
            "time_start": self.time_start,
            "acknowledged": False,
            "delivery_info": self.message.delivery_info,
            "worker_pid": os.getpid(),
        }

    def ack(self, direct: bool) -> None:
        # Through the event loop while it runs (a channel is not shared across threads);
        # directly once it has stopped (a warm shutdown finishing its jobs).
        if direct:
            self.message.ack_log_error(log, self._errors)
        else:
            self._ack(log, self._errors)

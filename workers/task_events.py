"""Celery task events for the jobs a worker takes, for Flower and `celery events`
(OUTCOMES_TASK_EVENTS=1; docs/operations.md#flower).

Each job shows under its job id (the task id of every message of it, workers/dispatch.py),
with the tool's name (the message's `kwargsrepr`), in the Celery state closest to what the
ledger recorded; each final event's `result` says the ledger's status (and code) in words,
e.g. `failed: TOOL_CRASHED`. Celery's states are a view: the ledger is the truth.

- succeeded, partial: task-succeeded, SUCCESS;
- failed (a crash, a deadline, OUTCOME_MISSING, ...), a late outcome, an outcome that could not
  be written: task-failed, FAILURE, with the code as its `exception`;
- declined, refused (a brake): task-revoked, REVOKED;
- retrying: task-retried, RETRY, with the code as its `exception` (the next attempt's message
  carries the same id, and moves it on);
- nothing run (the job runs elsewhere, its claim failed, an unknown job, its account at its
  concurrency limit: deferred): task-rejected, which
  leaves the job's state as it was (Celery ranks REJECTED below RECEIVED and STARTED).

A delivery that finds its job already closed ran nothing; it reports the ledger's recorded
status all the same (`... (recorded before this delivery, which ran nothing)`), so a message
that arrived after its job was closed does not stay RECEIVED.

Two ways send them. The batched runner (a threads worker, workers/batched.py) sends its own,
through the consumer's event dispatcher (`TaskEvents`), as Celery's requests do: received when
a message arrives, started once its claim is committed, the final event once its outcome is.
The task's own way (prefork, solo, a delayed message) keeps Celery's request: the task returns
the words (`settled_text`), and `ExecuteRequest` sends the event they name instead of Celery's
task-succeeded, so a crash never shows SUCCESS.
"""

from __future__ import annotations

import ast
import logging
import re
from typing import Any

from celery.worker.request import Request

from ledger.services.execute import Execution
from ledger.services.work import ClaimResult
from workers.app import EXECUTE_TASK

log = logging.getLogger(__name__)

SUCCEEDED = frozenset({"succeeded", "partial"})
REVOKED = frozenset({"declined", "refused"})
FAILED = frozenset({"failed", "late", "unrecorded", "error"})
RETRIED = frozenset({"retrying"})
_WORDS = re.compile(r"([a-z_]+)(?:: ([A-Z_]+))?")

LATE = "late (the job was closed before this outcome: kept as work.late_outcome)"
UNRECORDED = "unrecorded (the tool ran; its outcome could not be written: the reconciler judges)"
CLAIM_FAILED = "skipped (its claim failed: reported, for the reconciler to send another)"


def settled_text(result: Execution) -> str:
    """What one delivery came to, in the ledger's words: `succeeded`, `failed: TOOL_CRASHED`,
    `refused: BRAKE_ENGAGED`, `retrying: SOURCE_UNRELIABLE`, `skipped (job is running)`, ..."""
    if result.late:
        return LATE
    if result.claim is ClaimResult.DEFERRED:  # rejected: the job's state stays as it was
        return f"deferred ({result.reason})"
    if result.status is None:
        return f"skipped ({result.reason or result.claim.value})"
    words = result.status.value + (f": {result.code.value}" if result.code else "")
    if result.claim is not ClaimResult.SKIPPED:
        return words
    if result.status.terminal:
        return f"{words} (recorded before this delivery, which ran nothing)"
    return f"skipped ({result.reason or result.status.value})"


def failure_text(exc: BaseException) -> str:
    """A delivery whose execution raised: the reconciler will judge the job."""
    return f"error ({type(exc).__name__}: the reconciler judges the job)"


def event_of(text: str) -> tuple[str, dict[str, Any]]:
    """The task event that `settled_text`'s words stand for, with its fields."""
    found = _WORDS.match(text)
    status, code = (found.group(1), found.group(2)) if found else ("", None)
    if status in SUCCEEDED:
        return "task-succeeded", {"result": text}
    if status in REVOKED:
        return "task-revoked", {
            "result": text,
            "terminated": False,
            "signum": None,
            "expired": False,
        }
    if status in FAILED or status in RETRIED:
        kind = "task-failed" if status in FAILED else "task-retried"
        return kind, {"result": text, "exception": code or text, "traceback": None}
    return "task-rejected", {"result": text, "requeue": False}


class TaskEvents:
    """The batched runner's task events, sent through the consumer's event dispatcher (made
    again at each consumer restart, so looked up at each send). The dispatcher drops them
    when task events are off (`celery control disable_events` included); with an event loop
    it buffers them and the loop publishes them, as it does Celery's own requests' events."""

    def __init__(self, consumer: Any) -> None:
        self._consumer = consumer

    def received(self, task_id: str, job_id: str, headers: dict[str, Any]) -> None:
        self._send(
            "task-received",
            task_id,
            name=EXECUTE_TASK,
            args=headers.get("argsrepr") or repr([job_id]),
            kwargs=headers.get("kwargsrepr") or "{}",
            root_id=headers.get("root_id"),
            parent_id=headers.get("parent_id"),
            retries=headers.get("retries") or 0,
            eta=None,
            expires=headers.get("expires"),
        )

    def started(self, task_id: str) -> None:
        self._send("task-started", task_id)

    def settled(self, task_id: str, text: str, runtime: float | None) -> None:
        kind, fields = event_of(text)
        if runtime is not None:
            fields["runtime"] = runtime
        self._send(kind, task_id, **fields)

    def flush(self) -> None:
        """Publish what the dispatcher buffered (a stopping consumer's loop will not)."""
        dispatcher = self._consumer.event_dispatcher
        if dispatcher is None:
            return
        try:
            dispatcher.flush()
        except Exception as exc:  # an event is a view: never a stop's end
            log.debug("task events not flushed: %s", exc)

    def _send(self, kind: str, task_id: str, **fields: Any) -> None:
        dispatcher = self._consumer.event_dispatcher
        if dispatcher is None:
            return
        try:
            dispatcher.send(kind, uuid=task_id, **fields)
        except Exception as exc:  # an event is a view: never a job's end
            log.debug("task event %s for %s not sent: %s", kind, task_id, exc)


class ExecuteRequest(Request):  # type: ignore[misc]  # Celery is untyped
    """Celery's request for the execute task's own way (prefork, solo, a delayed message): its
    task-succeeded becomes the event that the task's returned words name."""

    def send_event(self, type: str, **fields: Any) -> None:  # Celery's names
        if type == "task-succeeded":
            text = _returned(fields.get("result"))
            if text is not None:
                type, named = event_of(text)
                fields = {"runtime": fields.get("runtime"), **named}
        super().send_event(type, **fields)


def _returned(result: Any) -> str | None:
    """The task's returned words: Celery hands the request the value's repr."""
    if not isinstance(result, str):
        return None
    try:
        value = ast.literal_eval(result)
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, str) else None

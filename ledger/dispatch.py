"""The dispatch port: how the core hands a job id to whatever runs jobs (Celery, in
`workers.dispatch`). Only the id travels (and the tool's name, for monitors such as Flower to
show): arguments and secrets stay in the ledger.

A dispatcher's `dispatch` returns only once the broker has confirmed the message (RabbitMQ's
publisher confirm, Redis's reply, the embedded broker's file written whole); anything less
raises `DispatchError`. The outbox (`ledger.runtime.outbox`) records each confirmation and
publishes again, from any process, every accepted job that has none: nothing is lost between a
decision's commit and its message.

Two optional abilities, which the Celery dispatcher has:
- `dispatch_many`: several messages at once, confirmed together (one wait for the broker's
  confirms, not one per message);
- a queue marker (`QueueMarker`): a mark the broker keeps only as long as the queue itself, so
  a queue deleted, re-created or wiped (a Redis restart without persistence) is evidence that
  its messages are gone, the one reason a confirmed message is sent again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ledger.errors import DispatchError


@dataclass(frozen=True)
class Message:
    """One job's message: its id, how long the broker should hold it (a retry's backoff), and
    the tool's name (shown by monitors; empty when the sender does not know it)."""

    job_id: str
    delay_s: float = 0.0
    tool: str = ""


class Dispatcher(Protocol):
    def dispatch(self, job_id: str, delay_s: float = 0.0) -> None: ...


@runtime_checkable
class BatchDispatcher(Protocol):
    def dispatch_many(self, messages: Sequence[Message]) -> list[DispatchError | None]:
        """Each message's fate, in order: None once confirmed, else why not."""
        ...


@runtime_checkable
class QueueMarker(Protocol):
    """A mark kept by the broker with the queue the dispatcher publishes to."""

    queue: str

    def marker_present(self, epoch: str) -> bool | None:
        """True: the queue still holds this epoch's mark; False: it does not (the queue was
        deleted, re-created or wiped since the mark was placed); None: the broker cannot be
        asked now (no evidence either way)."""
        ...

    def place_marker(self, epoch: str) -> None:
        """Declare the queue and mark it with this epoch (raises DispatchError)."""
        ...


def dispatch_all(dispatcher: Dispatcher, messages: Sequence[Message]) -> list[DispatchError | None]:
    """`dispatch_many` where the dispatcher has it, else one message at a time."""
    if isinstance(dispatcher, BatchDispatcher):
        return dispatcher.dispatch_many(messages)
    results: list[DispatchError | None] = []
    for message in messages:
        try:
            dispatcher.dispatch(message.job_id, message.delay_s)
        except DispatchError as exc:
            results.append(exc)
        else:
            results.append(None)
    return results

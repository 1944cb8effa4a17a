"""What the ledger knows of a job waiting for a worker: its start deadline, whether the broker
confirmed its message, and the backlog ahead of it (pure; the outbox and the reconciler act on
it, the envelope tells it).

A job that is merely late is not lost. Its message, once the broker confirmed it, stays in the
queue until a worker takes it, however long that takes; only the caller knows how late is too
late, so a waiting job is closed (`OUTCOME_MISSING`, `never_started`) only when its start
deadline passes: `start_within_s` after it was accepted (or, for a retry, after the retry was
due), the caller's value capped by the tool's (`@tool(start_within_s=…)`, default
`DEFAULT_START_WITHIN_S`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from ledger.codes import Status
from ledger.job_view import JobView, Waiting

# Ten minutes: a deploy, a broker restart or a crash loop fits in it; an agent that waits longer
# for a call to start has usually moved on, and can ask for longer with a tool that allows it.
DEFAULT_START_WITHIN_S = 600.0
MIN_START_WITHIN_S = 1.0
MAX_START_WITHIN_S = 7 * 86400.0
WAITING = frozenset({Status.QUEUED, Status.RETRYING})


class Evidence(StrEnum):
    """Why a confirmed message was sent again (`job.redispatched`'s `evidence`)."""

    QUEUE_LOST = "queue_lost"  # the queue's marker for the message's epoch is gone
    WORKER_REJECTED = "worker_rejected"  # a worker took the delivery and could not claim it


class DispatchState(BaseModel):
    """The outbox's record of a job's message: the broker confirmed the message asked for at
    stream version `version`, while the queue's epoch was `epoch`."""

    model_config = ConfigDict(frozen=True)

    version: int
    epoch: str | None
    confirmed_at: datetime
    rejected: str | None = None  # what a worker that could not claim a delivery said
    rejected_at: datetime | None = None
    rejected_version: int | None = None  # the wait (stream version) that delivery was for

    def confirms(self, view: JobView) -> bool:
        """Confirms the message of this wait (not one of an earlier wait)."""
        return self.version >= view.stream_version

    def rejects(self, view: JobView) -> bool:
        """A worker rejected a delivery of this wait: its message is gone."""
        return self.rejected is not None and (self.rejected_version or 0) >= view.stream_version


@dataclass(frozen=True)
class Confirmation:
    """A message the broker confirmed, to be recorded."""

    job_id: str
    version: int
    epoch: str | None
    confirmed_at: datetime


def effective_start_within(asked: float | None, tool_cap: float) -> float:
    """The caller's start deadline, capped by the tool's (the caller may only ask for less)."""
    return tool_cap if asked is None else min(asked, tool_cap)


def start_deadline(view: JobView, default_s: float = DEFAULT_START_WITHIN_S) -> datetime:
    """When this wait ends: the view's own deadline, or (a job decided before deadlines were
    recorded) `default_s` after it began to wait."""
    if view.start_by is not None:
        return view.start_by
    return waiting_since(view) + timedelta(seconds=default_s)


def waiting_since(view: JobView) -> datetime:
    """When this wait began: the decision, or the moment the retry was due."""
    if view.status is Status.RETRYING and view.due_at is not None:
        return view.due_at
    return view.created_at


def waiting(view: JobView, dispatch: DispatchState | None, at: datetime) -> Waiting | None:
    if view.terminal or view.status not in WAITING:
        return None
    since = waiting_since(view)
    confirmed = dispatch is not None and dispatch.confirms(view)
    return Waiting(
        since=since,
        seconds=round(max(0.0, (at - since).total_seconds()), 3),
        start_by=start_deadline(view),
        dispatch="confirmed" if confirmed else "unconfirmed",
        dispatches=view.dispatches,
    )


@dataclass(frozen=True)
class DispatchSummary:
    """The outbox at a glance (`outcomes status`, /metrics)."""

    waiting: int  # jobs queued or retrying
    unconfirmed: int  # of which the broker has not confirmed the current message
    oldest_waiting_since: datetime | None
    redispatched: dict[str, int]  # job.redispatched events by evidence ("timer": before it)


@dataclass(frozen=True)
class Backlog:
    """The queue ahead of a new job: how many jobs wait, and how fast workers start them when
    there is work (None: not measured yet)."""

    waiting: int
    starts_per_s: float | None

    def wait_s(self) -> float | None:
        """How long a job submitted now would wait to start, or None when unknown."""
        if self.starts_per_s is None or self.starts_per_s <= 0:
            return None
        return self.waiting / self.starts_per_s

    def refuses(self, start_within_s: float) -> float | None:
        """The `retry_after_s` for a job whose deadline the backlog already exceeds, else None:
        by then the backlog will have drained below the deadline."""
        wait = self.wait_s()
        if wait is None or wait <= start_within_s:
            return None
        return float(max(1, math.ceil(wait - start_within_s)))

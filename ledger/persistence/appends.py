"""What a job append says and what became of it: the value types of the store's write side
(`Writes.append_jobs`), shared by every backend and by the services that build them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Literal, TypeVar

from pydantic import BaseModel

from ledger.brake_view import BrakeView
from ledger.events import NewEvent, RecordedEvent
from ledger.job_view import JobView
from ledger.token_view import TokenView
from ledger.webhook_view import WebhookView

NO_STREAM = 0  # expected_version for a stream that must not exist yet
V = TypeVar("V")


@dataclass(frozen=True)
class LeaseChange:
    """What an append does to its job's lease: open it for an attempt, or end it."""

    op: Literal["start", "drop"]
    attempt: int
    worker: str = ""
    expires_at: datetime | None = None


@dataclass(frozen=True)
class QuotaCheck:
    """A new job's quota, checked under the account's and tool's lock: the item is refused
    with status QUOTA (nothing written) when `limit` jobs of its account and tool were already
    accepted after `since`."""

    limit: int
    since: datetime


@dataclass(frozen=True)
class JobAppend:
    """A job stream's next events, with what the writer already knows of the stream: the view
    they follow (None: a new job). Batches of these commit together (`append_jobs`)."""

    job_id: str
    events: Sequence[NewEvent]
    before: JobView | None
    lease: LeaseChange | None = None
    # The brake check of a submit or a claim: the item is refused with status BRAKED (nothing
    # written) when a brake in one of these scopes holds.
    brake_scopes: tuple[str, ...] = ()
    # A claim's check is ordered against `brake pull`: the brakes lock is taken shared first.
    brakes_lock: bool = False
    notify: bool = True  # wake long-polls (nobody can wait on a job not yet answered)
    # The submitting token, admitted without a read (an API process's cache): the item is
    # refused with status REVOKED (nothing written) if the token has been revoked by then.
    token_id: str | None = None
    quota: QuotaCheck | None = None  # a new job's quota (its tool has one)

    @property
    def expected_version(self) -> int:
        return self.before.stream_version if self.before else NO_STREAM


class AppendStatus(StrEnum):
    OK = "ok"
    CONFLICT = "conflict"  # the stream moved past the view the writer had
    TERMINAL = "terminal"  # the job already has its one terminal outcome
    DUPLICATE = "duplicate"  # an event id was recorded before (a retried write that landed)
    IDEMPOTENCY = "idempotency"  # another job of the account holds the idempotency key
    BRAKED = "braked"  # a brake in the item's scopes holds: nothing was written
    REVOKED = "revoked"  # the item's token has been revoked: nothing was written
    QUOTA = "quota"  # the account's quota for the tool is used up: nothing was written


@dataclass(frozen=True)
class JobAppended:
    """What became of one `JobAppend` of a batch."""

    status: AppendStatus
    appended: Appended | None = None
    holder: JobView | None = None  # IDEMPOTENCY: the job that holds the key, as it stands
    brakes: tuple[BrakeView, ...] = ()  # BRAKED: the brakes that hold, oldest first
    # QUOTA: when the oldest job counted in the window was created (the window frees then).
    oldest: datetime | None = None

    @property
    def job(self) -> JobView:
        if self.appended is None:
            raise ValueError(f"nothing was appended ({self.status})")
        return self.appended.job


@dataclass(frozen=True)
class Appended:
    """What one append recorded, and the stream's read-model view it projected (folded once:
    callers use this view instead of folding the events again)."""

    events: list[RecordedEvent]
    view: BaseModel | None

    @property
    def job(self) -> JobView:
        return _as(self.view, JobView)

    @property
    def brake(self) -> BrakeView:
        return _as(self.view, BrakeView)

    @property
    def token(self) -> TokenView:
        return _as(self.view, TokenView)

    @property
    def webhook(self) -> WebhookView:
        return _as(self.view, WebhookView)


def _as(view: object, kind: type[V]) -> V:
    if not isinstance(view, kind):
        raise TypeError(f"the append projected {type(view).__name__}, not {kind.__name__}")
    return view

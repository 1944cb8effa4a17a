"""What one may ask the ledger's read side, and the shapes of some answers (no storage here).

Account scoping is part of every question: `account=None` means every account (a token scoped
to `*`), and a store answers it in its own query, so a page never carries another account's row.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

from ledger.brake_view import BrakeView
from ledger.clock import format_time
from ledger.events import RecordedEvent
from ledger.job_view import JobView

MAX_POSITION = 2**63 - 1  # positions are BIGINT: a larger cursor is not a position


@dataclass(frozen=True)
class EventFilter:
    account: str | None = None  # None: every account, brake and token streams included
    tool: str | None = None
    type: str | None = None
    code: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    after: int = 0
    limit: int = 100


@dataclass(frozen=True)
class JobFilter:
    account: str | None = None
    after: int = 0  # a ledger_position cursor: only jobs changed after it
    limit: int = 100
    before: int | None = None  # only jobs whose ledger_position is below it
    newest_first: bool = False  # the operator's view: what just changed comes first
    # The console's filters (None: any); each is a column of the jobs read model.
    status: str | None = None
    code: str | None = None
    tool: str | None = None
    since: datetime | None = None  # created at or after
    until: datetime | None = None  # created before
    spends: bool | None = None
    turn: str | None = None  # the agent's turn (docs/turns.md): read from the job's view

    def matches(self, view: JobView) -> bool:
        """The filter as a predicate (the memory store's reading; SQL says it in its query)."""
        code = view.code.value if view.code else None
        return (
            view.ledger_position > self.after
            and (self.before is None or view.ledger_position < self.before)
            and self.account in (None, view.account)
            and self.status in (None, view.status.value)
            and self.code in (None, code)
            and self.tool in (None, view.tool)
            and (self.since is None or view.created_at >= self.since)
            and (self.until is None or view.created_at < self.until)
            and self.spends in (None, view.spends)
            and self.turn in (None, view.turn)
        )


@dataclass(frozen=True)
class MissingOutcome:
    """A job recorded failed with OUTCOME_MISSING: when (its last change), the silence's
    cause (never_started, worker_lost, no_outcome_returned) and whether its tool spends."""

    at: datetime
    cause: str | None
    spends: bool


@dataclass(frozen=True)
class JobSummary:
    jobs: int
    by_status: dict[str, int] = field(default_factory=dict)
    by_code: dict[str, int] = field(default_factory=dict)
    by_tool: dict[str, int] = field(default_factory=dict)
    by_account: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_groups(cls, groups: Iterable[tuple[str, str | None, str, str, int]]) -> JobSummary:
        """The summary of (status, code, tool, account, count) groups."""
        counts: dict[str, Counter[str]] = {
            k: Counter() for k in ("status", "code", "tool", "account")
        }
        total = 0
        for status, code, tool, account, n in groups:
            total += n
            counts["status"][status] += n
            counts["tool"][tool] += n
            counts["account"][account] += n
            if code is not None:
                counts["code"][code] += n
        return cls(
            jobs=total,
            by_status=dict(sorted(counts["status"].items())),
            by_code=dict(sorted(counts["code"].items())),
            by_tool=dict(sorted(counts["tool"].items())),
            by_account=dict(sorted(counts["account"].items())),
        )

    def to_json(self) -> dict[str, object]:
        return {
            "jobs": self.jobs,
            "by_status": self.by_status,
            "by_code": self.by_code,
            "by_tool": self.by_tool,
            "by_account": self.by_account,
        }


@dataclass(frozen=True)
class JobCount:
    """How many jobs share a decision (accepted or not), a status, a code and a tool."""

    accepted: bool
    status: str
    code: str | None
    tool: str
    jobs: int


@dataclass(frozen=True)
class FindingCount:
    """How many findings of one type (`job.redispatched`, `work.retry_scheduled`,
    `job.outcome_missing`) and cause the reconciler recorded, and when the newest was."""

    type: str
    cause: str
    events: int
    last_at: datetime


@dataclass(frozen=True)
class Heads:
    """Every stream's head (version, hash) up to `position`, and how many events that is."""

    position: int
    events: int
    heads: dict[str, tuple[int, str]]
    ledger_hash: str | None = None  # the ledger-wide link at `position`


@dataclass(frozen=True)
class SequencerState:
    """Where the sequencer stands (Postgres): the last ledger position it gave, from where
    positions are dense, and the committed events still waiting for a position."""

    head: int
    dense_from: int
    ticks: int
    ticked_at: datetime
    waiting: int  # events committed and not yet sequenced
    lag_s: float  # how long the oldest of them has waited since it was recorded (0: none)
    # Partitions made above the newest write position (0018): at 0 the next partition's
    # first write fails (NoPartitionError); the sequencer's leader keeps it at 2 or more.
    partitions_ahead: int | None = None


@dataclass(frozen=True)
class OrderProblems:
    """What only the order rows can say is wrong (`audit verify`, Postgres): committed events
    the sequencer passed without a position (their write positions), order rows whose event is
    gone (their ledger positions), and events given more than one position (write positions)."""

    unsequenced: list[int] = field(default_factory=list)
    orphaned: list[int] = field(default_factory=list)
    duplicated: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class BrakeHold:
    """A brake that holds now, and how many jobs it keeps waiting (as one caller may see)."""

    brake: BrakeView
    queued_jobs: int

    def to_json(self) -> dict[str, object]:
        """An item of `GET /v1/brakes` and `outcomes brake status --json`."""
        b = self.brake
        return {
            "brake_id": b.brake_id,
            "scope": b.scope,
            "reason": b.reason,
            "operator": b.operator,
            "pulled_at": format_time(b.pulled_at),
            "queued_jobs": self.queued_jobs,
        }


class LedgerLink(NamedTuple):
    """An event as the ledger-order pass of `audit verify` reads it: its place and its two
    hashes, nothing of its content (the stream-order pass recomputes the hash from that)."""

    position: int
    stream_id: str
    stream_version: int
    hash: str
    ledger_hash: str | None


class StreamEvent(NamedTuple):
    """An event as the stream-order pass reads it. `sequenced`: it holds a ledger position
    (on Postgres an event committed after the last tick does not yet; it is folded into the
    read models, which its append wrote, but its links wait for the next verification)."""

    event: RecordedEvent
    sequenced: bool


StreamKey = tuple[str, int]  # (stream_id, stream_version): the stream-order pass's cursor

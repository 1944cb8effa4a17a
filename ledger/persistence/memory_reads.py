"""The read side of the contract over the in-memory state (see `ledger.persistence.memory`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ledger.access import token_stream
from ledger.brake_view import BrakeView, fold_brake
from ledger.brakes import brake_stream
from ledger.codes import Code, Status
from ledger.events import RecordedEvent, job_stream
from ledger.job_view import JobView
from ledger.persistence.base import Reads
from ledger.persistence.memory_audit import MemoryAuditReads
from ledger.persistence.memory_fairness import MemoryFairnessReads
from ledger.persistence.memory_outbox import MemoryOutboxReads
from ledger.persistence.memory_rebuild import MemoryRebuildReads
from ledger.persistence.memory_state import MemoryState
from ledger.persistence.memory_tree import MemoryTreeReads
from ledger.persistence.memory_webhooks import MemoryWebhookReads
from ledger.queries import (
    EventFilter,
    FindingCount,
    Heads,
    JobCount,
    JobFilter,
    JobSummary,
    MissingOutcome,
)
from ledger.read_models import READ_MODELS
from ledger.token_view import TokenView, fold_token, presented

_MODELS = {model.table: model for model in READ_MODELS}


class MemoryReads(
    MemoryOutboxReads,
    MemoryWebhookReads,
    MemoryFairnessReads,
    MemoryAuditReads,
    MemoryRebuildReads,
    MemoryTreeReads,
    Reads,
):
    def __init__(self, state: MemoryState) -> None:
        self.state = state

    # --- jobs -----------------------------------------------------------------------------

    def job(self, job_id: str) -> JobView | None:
        return self.state.jobs.get(job_id)

    def jobs_by_id(self, job_ids: Sequence[str]) -> dict[str, JobView]:
        return {j: self.state.jobs[j] for j in job_ids if j in self.state.jobs}

    def jobs(self, where: JobFilter) -> list[JobView]:
        found = [v for v in self.state.jobs.values() if where.matches(v)]
        found.sort(key=lambda v: v.ledger_position, reverse=where.newest_first)
        return found[: where.limit]

    def job_by_idempotency_key(self, account: str, key: str) -> JobView | None:
        job_id = self.state.idempotency.get((account, key))
        return self.state.jobs[job_id] if job_id else None

    def accepted_in_window(
        self, account: str, tool: str, since: datetime
    ) -> tuple[int, datetime | None]:
        times = [
            v.created_at
            for v in self.state.jobs.values()
            if v.account == account and v.tool == tool and v.accepted and v.created_at > since
        ]
        return len(times), min(times, default=None)

    def job_positions(self, job_ids: Sequence[str]) -> dict[str, int]:
        jobs = self.state.jobs
        return {j: jobs[j].ledger_position for j in job_ids if j in jobs}

    def summarize_jobs(
        self,
        account: str | None,
        tool: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> JobSummary:
        groups: Counter[tuple[str, str | None, str, str]] = Counter()
        if since is None and until is None:  # the kept counts
            for (a, t, _, status, code), n in self.state.job_counts.items():
                if n and account in (None, a) and tool in (None, t):
                    groups[status, code, t, a] += n
            return JobSummary.from_groups((*k, n) for k, n in groups.items())
        # A range: the views themselves (a memory ledger keeps no hourly counts).
        for v in self.state.jobs.values():
            if account not in (None, v.account) or tool not in (None, v.tool):
                continue
            if (since and v.created_at < since) or (until and v.created_at >= until):
                continue
            groups[v.status.value, v.code.value if v.code else None, v.tool, v.account] += 1
        return JobSummary.from_groups((*k, n) for k, n in groups.items())

    def count_statuses(
        self,
        account: str | None,
        tool: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> dict[str, int]:
        return self.summarize_jobs(account, tool, since, until).by_status

    def count_jobs(self) -> list[JobCount]:
        groups: Counter[tuple[bool, str, str | None, str]] = Counter()
        for (_, tool, accepted, status, code), n in self.state.job_counts.items():
            groups[accepted, status, code, tool] += n
        kept = ((k, n) for k, n in groups.items() if n)
        return [JobCount(*k, jobs=n) for k, n in sorted(kept, key=_group_order)]

    def count_findings(self) -> list[FindingCount]:
        return [
            FindingCount(type_, cause, n, last)
            for (type_, cause), (n, last) in sorted(self.state.findings.items())
        ]

    def missing_outcomes(
        self, account: str | None, since: datetime, limit: int
    ) -> list[MissingOutcome]:
        found = [
            v
            for v in self.state.jobs.values()
            if v.code is Code.OUTCOME_MISSING
            and account in (None, v.account)
            and v.updated_at >= since
        ]
        found.sort(key=lambda v: v.ledger_position, reverse=True)
        return [
            MissingOutcome(v.updated_at, v.error.cause if v.error else None, v.spends)
            for v in found[:limit]
        ]

    # --- brakes ---------------------------------------------------------------------------

    def active_brakes(self) -> list[BrakeView]:
        # From the brake streams' events, as the SQL store decides (never from the view).
        folded = (fold_brake(self.read_stream(brake_stream(b))) for b in self.state.brakes)
        held = [b for b in folded if b is not None and b.active]
        return sorted(held, key=lambda b: (b.pulled_at, b.brake_id))

    def brake(self, brake_id: str) -> BrakeView | None:
        return fold_brake(self.read_stream(brake_stream(brake_id)))

    def waiting_jobs(self, scope: str, account: str | None = None) -> int:
        kind, _, name = scope.partition(":")
        waiting = (Status.QUEUED.value, Status.RETRYING.value)
        return sum(
            n
            for (a, t, _, status, _), n in self.state.job_counts.items()
            if status in waiting
            and (kind != "tool" or t == name)
            and (kind != "account" or a == name)
            and (kind != "turn" or a == name.split("/")[0])
            and account in (None, a)
        )

    def recent_brakes(self, limit: int) -> list[BrakeView]:
        found = sorted(self.state.brakes.values(), key=lambda b: b.ledger_position, reverse=True)
        return found[:limit]

    def brakes_in_scope(self, scope: str) -> list[BrakeView]:
        found = [b for b in self.state.brakes.values() if b.scope == scope]
        return sorted(found, key=lambda b: (b.pulled_at, b.brake_id))

    def jobs_held(self, brake_ids: Sequence[str], account: str | None = None) -> dict[str, int]:
        wanted = set(brake_ids)
        held: dict[str, int] = {}
        for v in self.state.jobs.values():
            cause = v.error.cause if v.error else None
            if v.code is Code.BRAKE_ENGAGED and cause in wanted and account in (None, v.account):
                held[str(cause)] = held.get(str(cause), 0) + 1
        return held

    # --- tokens ---------------------------------------------------------------------------

    def token(self, token_id: str) -> TokenView | None:
        return fold_token(self.read_stream(token_stream(token_id)))

    def token_by_hash(self, token_hash: str) -> TokenView | None:
        token_id = self.state.token_hashes.get(token_hash)
        if token_id is None:
            return None
        return presented(self.read_stream(token_stream(token_id)), token_hash)

    def tokens(self) -> list[TokenView]:
        return sorted(self.state.tokens.values(), key=lambda t: t.ledger_position)

    # --- events ---------------------------------------------------------------------------

    def read_stream(self, stream_id: str) -> list[RecordedEvent]:
        return list(self.state.streams.get(stream_id, ()))

    def find_events(self, where: EventFilter) -> list[RecordedEvent]:
        owned: set[str] | None = None
        if where.account is not None or where.tool is not None:
            owned = {
                job_stream(v.job_id)
                for v in self.state.jobs.values()
                if where.account in (None, v.account) and where.tool in (None, v.tool)
            }
        found = []
        for e in self.state.events:
            if e.position <= where.after or (owned is not None and e.stream_id not in owned):
                continue
            if where.type not in (None, e.type) or where.code not in (None, e.code):
                continue
            if (where.since and e.recorded_at < where.since) or (
                where.until and e.recorded_at >= where.until
            ):
                continue
            found.append(e)
            if len(found) == where.limit:
                break
        return found

    def heads(self) -> Heads:
        heads = {s: (evs[-1].stream_version, evs[-1].hash) for s, evs in self.state.streams.items()}
        last = self.state.events[-1].ledger_hash if self.state.events else None
        return Heads(
            position=self.last_position(),
            events=len(self.state.events),
            heads=heads,
            ledger_hash=last,
        )

    def last_event_by(self, actor: str) -> RecordedEvent | None:
        return next((e for e in reversed(self.state.events) if e.actor == actor), None)

    def last_position(self) -> int:
        return self.state.events[-1].position if self.state.events else 0

    # --- read models, as stored -----------------------------------------------------------

    def read_model_rows(self, table: str, after: str | None, limit: int) -> list[dict[str, Any]]:
        views = self.state.views(table)
        keys = sorted(k for k in views if after is None or k > after)[:limit]
        # A memory ledger keeps the views alone: its rows are what the SQL tables would hold.
        return [_MODELS[table].row(k, views[k]) for k in keys]


def _group_order(item: tuple[tuple[bool, str, str | None, str], int]) -> tuple[object, ...]:
    (accepted, status, code, tool), _ = item
    return (accepted, status, code or "", tool)

"""Silence over time: the jobs the ledger recorded failed with OUTCOME_MISSING, counted by cause
(never_started and worker_lost, found by the reconciler; no_outcome_returned, recorded by the
worker) in equal buckets of a window (the console's silence chart)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from ledger.codes import OutcomeMissingCause
from ledger.runtime.ledger import Ledger

# A window's findings read at most: a chart of a storm needs its shape, not every job.
MAX_FINDINGS = 20_000
UNKNOWN = "unknown"  # a finding recorded without a cause (none do today)


@dataclass(frozen=True)
class Bucket:
    start: datetime
    by_cause: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.by_cause.values())


@dataclass(frozen=True)
class SilenceReport:
    since: datetime
    until: datetime
    causes: tuple[str, ...]  # the chart's series, in a fixed order
    buckets: list[Bucket]
    by_cause: dict[str, int]
    spending: int  # of them, jobs whose tool spends: the agent was told verify_at_source
    truncated: bool  # more findings than MAX_FINDINGS: the oldest buckets are undercounted

    @property
    def total(self) -> int:
        return sum(self.by_cause.values())


def silence(
    ledger: Ledger, account: str | None, until: datetime, window: timedelta, buckets: int = 24
) -> SilenceReport:
    since = until - window
    width = window / buckets
    causes = tuple(c.value for c in OutcomeMissingCause)
    with ledger.store.reading() as reads:
        found = reads.missing_outcomes(account, since, MAX_FINDINGS + 1)
    truncated = len(found) > MAX_FINDINGS
    counts = [dict.fromkeys(causes, 0) for _ in range(buckets)]
    by_cause = dict.fromkeys(causes, 0)
    spending = 0
    for finding in found[:MAX_FINDINGS]:
        if finding.at >= until:  # a late outcome moved it past the window's end
            continue
        index = min(int((finding.at - since) / width), buckets - 1)
        cause = finding.cause if finding.cause in by_cause else UNKNOWN
        counts[index][cause] = counts[index].get(cause, 0) + 1
        by_cause[cause] = by_cause.get(cause, 0) + 1
        spending += finding.spends
    return SilenceReport(
        since=since,
        until=until,
        causes=tuple(by_cause),
        buckets=[Bucket(since + width * i, counts[i]) for i in range(buckets)],
        by_cause=by_cause,
        spending=spending,
        truncated=truncated,
    )

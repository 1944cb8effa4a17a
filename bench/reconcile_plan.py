"""What bench.reconcile runs: its options, and what each of its two ledgers holds (`Plan`)."""

from __future__ import annotations

from dataclasses import dataclass

from ledger.reconcile_rules import ReconcilePolicy

SMALL, LARGE = "small", "large"  # ledger A and ledger B
# Generous on purpose: the steady clock is the end of filling, and nothing may be overdue then
# however long the open jobs took to create. The scan's query is the same whatever the values.
POLICY = ReconcilePolicy()  # open jobs wait DEFAULT_START_WITHIN_S (600 s) to start
LEASE_S = 600.0


@dataclass(frozen=True)
class Options:
    small: int
    large: int
    open_jobs: int
    running: int
    reps: int
    explain: bool
    as_json: bool
    verify_large: bool
    churn: bool


@dataclass(frozen=True)
class Plan:
    """What one ledger holds: `events` events in all, `open_jobs` of its jobs still open."""

    events: int
    open_jobs: int
    running: int

    @property
    def queued(self) -> int:
        return self.open_jobs - self.running

    @property
    def open_events(self) -> int:
        return self.queued + 2 * self.running  # accepted (+ started)

    @property
    def closed_jobs(self) -> int:
        return (self.events - self.open_events) // 3  # accepted, started, succeeded

    @property
    def refused_jobs(self) -> int:
        return (self.events - self.open_events) % 3  # one event each: the count is exact

    @property
    def jobs(self) -> int:
        return self.closed_jobs + self.refused_jobs + self.open_jobs

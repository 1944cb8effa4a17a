"""A total-queue check in the spirit of Jepsen's: after a scenario, settle everything, then
count what was lost, duplicated or unexpected, and prove the chains still verify.

- lost: an accepted job that is not terminal after the reconciler reached a fixed point;
- duplicated: a job with more than one terminal event;
- unexpected: a job stream whose first event is not a decision, or work recorded for a job
  that was refused at submit;
- over_effects: spending-tool jobs whose real-world side effect happened more than once.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta

from ledger.dispatch import Dispatcher
from ledger.events import TERMINAL_EVENT_TYPES, job_id_of
from ledger.persistence.sql_store import SqlStore
from ledger.reconcile_rules import ReconcilePolicy
from ledger.runtime.ledger import Ledger
from ledger.services.reconcile import reconcile_once
from tests.factories import verify_store

DECISIONS = frozenset({"job.accepted", "job.refused"})


@dataclass
class Counters:
    scenario: str
    jobs: int = 0
    accepted: int = 0
    terminal: int = 0
    lost: int = 0
    duplicated: int = 0
    unexpected: int = 0
    over_effects: int = 0
    chain_ok: bool = True
    by_status: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return (
            self.lost == 0
            and self.duplicated == 0
            and self.unexpected == 0
            and self.over_effects == 0
            and self.chain_ok
        )

    def line(self) -> str:
        body = {k: v for k, v in asdict(self).items() if k not in {"notes"}}
        return " ".join(f"{k}={v}" for k, v in body.items())


def settle(
    store: SqlStore,
    dispatcher: Dispatcher | None,
    policy: ReconcilePolicy,
    timeout_s: float,
    open_ok: Iterable[str] = (),
) -> int:
    """Run the reconciler until every job is terminal (a fixed point) or the time is up.

    Passes use the real clock: leases and start deadlines must really run out. Returns the
    number of findings recorded on the way."""
    deadline = time.monotonic() + timeout_s
    recorded = 0
    allowed = set(open_ok)
    while True:
        recorded += len(reconcile_once(Ledger(store), dispatcher, policy).recorded)
        if not (set(open_jobs(store)) - allowed):
            return recorded
        if time.monotonic() > deadline:
            return recorded
        time.sleep(0.2)  # between reconcile passes, as the real reconciler's interval


def open_jobs(store: SqlStore) -> list[str]:
    from sqlalchemy import select

    from ledger.persistence.schema import jobs

    with store.connection() as conn:
        query = select(jobs.c.job_id).where(jobs.c.terminal.is_(False))
        return [row.job_id for row in conn.execute(query)]


def check(
    store: SqlStore,
    scenario: str,
    spending_jobs: Iterable[str] = (),
    side_effect_jobs: Iterable[str] = (),
) -> Counters:
    """Count the ledger's promises after a scenario (call `settle` first)."""
    counters = Counters(scenario)
    streams: dict[str, list[str]] = {}
    for event in store.iter_events():
        if event.stream_id.startswith("job-"):
            streams.setdefault(event.stream_id, []).append(event.type)
    statuses: Counter[str] = Counter()
    for stream_id, types in streams.items():
        counters.jobs += 1
        terminal = [t for t in types if t in TERMINAL_EVENT_TYPES]
        if types[0] not in DECISIONS:
            counters.unexpected += 1
            counters.notes.append(f"{job_id_of(stream_id)} starts with {types[0]}")
        if types[0] == "job.refused" and len(types) > 1:
            counters.unexpected += 1
            counters.notes.append(f"{job_id_of(stream_id)} has work after a refusal")
        if types[0] == "job.accepted":
            counters.accepted += 1
            if not terminal:
                counters.lost += 1
                counters.notes.append(f"{job_id_of(stream_id)} still open: {types}")
        if len(terminal) > 1:
            counters.duplicated += 1
        if terminal:
            counters.terminal += 1
            statuses[terminal[0]] += 1
    counters.by_status = dict(sorted(statuses.items()))
    effects = Counter(side_effect_jobs)
    spending = set(spending_jobs)
    counters.over_effects = sum(1 for job, n in effects.items() if job in spending and n > 1)
    report = verify_store(store)
    counters.chain_ok = report.ok
    if not report.ok and report.first_problem is not None:
        counters.notes.append(report.first_problem.message)
    print(f"[reliability] {counters.line()}")
    return counters


def fast_policy(relay_after_s: float = 1.0, rejected_backoff_s: float = 0.5) -> ReconcilePolicy:
    """Short delays so scenarios settle in seconds, not minutes (a job's start deadline is its
    own: scenarios that must see jobs closed submit them with a short `start_within_s`)."""
    return ReconcilePolicy(relay_after_s=relay_after_s, rejected_backoff_s=rejected_backoff_s)


def utc_now_plus(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)

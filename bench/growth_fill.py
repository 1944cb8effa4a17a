"""Fill a ledger through the product's own write path, as its workers and API write it: each
job's decision, then its claim (`work.started` with a lease), then its outcome, each a batch of
`JobAppend`s through the store's batched append (`Store.append_jobs`, the group commit's
statement), each item after the view the previous write projected. Three writes a job, about
2.9 events a job (a few refusals are one event, a few failures three). Partitions are made
ahead as it goes (`make_partitions`, before each batch), as the sequencer's leader would.

Used by bench.growth; `time_three_writes` is its "100 jobs' three writes" figure."""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from bench._store import AppendStatus, JobAppend, LeaseChange
from ledger.codes import Code
from ledger.error_info import ErrorInfo
from ledger.events import (
    JobAccepted,
    JobRefused,
    NewEvent,
    WorkFailed,
    WorkStarted,
    WorkSucceeded,
)
from ledger.job_view import JobView
from ledger.runtime.ledger import Ledger
from ledger.uuid7 import new_id

ACCOUNTS = tuple(f"acct-{i}" for i in range(10))
TOOLS = ("tracker.read_issue", "seo.keyword_sweep", "mail.send_release_note", "social.draw_card")
WORKER = "worker:bench-growth:1"
BATCH = 500
# With autovacuum off (this machine's CI server sets it off), the fill vacuums and analyzes the
# scratch database itself this often, as autovacuum would: no deployment runs without it, and
# a ledger that never reclaims its dead rows (each job's row is rewritten twice) measures that.
VACUUM_EVERY = 50_000
PARTITIONS_AHEAD = 4  # made before each batch, as the sequencer's leader would (every 10 s)
# About what an agent's call carries: a few hundred bytes of arguments and of result.
ARG_TEXT = "an issue reference and a short instruction for the tool, " * 4
RESULT_TEXT = "a short answer the tool gave back, with a title and a summary line; " * 4


@dataclass
class Filled:
    """What a fill made: how many jobs, when each tenth was done (for `archive --before`)."""

    jobs: int = 0
    seconds: float = 0.0
    marks: list[tuple[int, datetime]] = field(default_factory=list)  # (jobs so far, at)
    cut: datetime | None = None  # when `align` left the ledger at a clean cut (the archive's)
    padding: int = 0  # the one-event jobs `align` wrote
    vacuum_s: float = 0.0  # of `seconds`, spent in VACUUM (ANALYZE) when autovacuum is off


def _decision(number: int, rng: random.Random) -> NewEvent:
    account, tool = ACCOUNTS[number % len(ACCOUNTS)], TOOLS[number % len(TOOLS)]
    args = {"issue_ref": f"T-{number}", "note": ARG_TEXT}
    if rng.random() < 0.05:  # refused at submit, naming what is missing
        error = ErrorInfo(code=Code.INPUT_MISSING, message="the issue reference is missing")
        refused = JobRefused(account=account, tool=tool, args=args, error=error)
        return NewEvent(payload=refused, actor="token-bench")
    accepted = JobAccepted(account=account, tool=tool, args=args, spends=tool != TOOLS[0])
    return NewEvent(payload=accepted, actor="token-bench")


def _outcome(number: int, rng: random.Random) -> NewEvent:
    if rng.random() < 0.1:
        error = ErrorInfo(
            code=Code.SOURCE_UNRELIABLE, dependency="tracker", message="the tracker answered 503"
        )
        return NewEvent(payload=WorkFailed(attempt=1, error=error), actor=WORKER)
    result = {"title": f"issue {number}", "summary": RESULT_TEXT}
    return NewEvent(payload=WorkSucceeded(attempt=1, result=result), actor=WORKER)


def _checked(found: Sequence[object]) -> list[JobView]:
    views = []
    for item in found:
        status = getattr(item, "status", None)
        if status is not AppendStatus.OK:
            raise RuntimeError(f"a fill append answered {status}")
        views.append(item.job)  # type: ignore[attr-defined]
    return views


def three_writes(ledger: Ledger, first: int, count: int, rng: random.Random) -> None:
    """`count` jobs, numbered from `first`: their decisions, claims and outcomes, three
    batched appends."""
    decided = _checked(
        ledger.store.append_jobs(
            [
                JobAppend(new_id(), [_decision(n, rng)], None, notify=False)
                for n in range(first, first + count)
            ]
        )
    )
    accepted = [v for v in decided if v.accepted]
    lease = datetime.now(UTC) + timedelta(seconds=30)
    claim = WorkStarted(attempt=1, worker=WORKER, lease_expires_at=lease)
    started = _checked(
        ledger.store.append_jobs(
            [
                JobAppend(
                    v.job_id,
                    [NewEvent(payload=claim, actor=WORKER)],
                    v,
                    lease=LeaseChange("start", 1, WORKER, lease),
                    notify=False,
                )
                for v in accepted
            ]
        )
    )
    _checked(
        ledger.store.append_jobs(
            [
                JobAppend(
                    v.job_id,
                    [_outcome(first + k, rng)],
                    v,
                    lease=LeaseChange("drop", 1),
                    notify=False,
                )
                for k, v in enumerate(started)
            ]
        )
    )


def fill(
    ledger: Ledger,
    upto: int,
    filled: Filled,
    seed: int = 44,
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
) -> None:
    """Add jobs until the ledger holds `upto` of them (from `filled.jobs`)."""
    rng = random.Random(seed + filled.jobs)
    started = time.perf_counter()
    tenth = max((upto - filled.jobs) // 10, 1)
    next_mark = filled.jobs + tenth
    last_say = started
    vacuum_every = 0 if autovacuum_on(ledger) else VACUUM_EVERY
    next_vacuum = filled.jobs + vacuum_every
    while filled.jobs < upto:
        # The events' ranges and the jobs' windows, ahead of the batch (a small scratch ledger's
        # ranges fill in less than the leader's 10 s).
        ledger.store.make_partitions(PARTITIONS_AHEAD)
        count = min(BATCH, upto - filled.jobs)
        three_writes(ledger, filled.jobs, count, rng)
        ledger.store.sequence()  # as the reconciler's sequencer would, as writes go on
        ledger.store.compact_counts()  # and as its leader folds the counts' deltas
        filled.jobs += count
        if filled.jobs >= next_mark:
            filled.marks.append((filled.jobs, datetime.now(UTC)))
            next_mark += tenth
        if vacuum_every and filled.jobs >= next_vacuum:
            next_vacuum += vacuum_every
            filled.vacuum_s += vacuum(ledger)
        if time.perf_counter() - last_say > 30:
            last_say = time.perf_counter()
            say(f"  {filled.jobs} jobs")
    filled.seconds += time.perf_counter() - started
    say(f"filled to {filled.jobs} jobs ({filled.seconds:.0f} s of filling so far)")


def autovacuum_on(ledger: Ledger) -> bool:
    with ledger.store.connection() as conn:  # type: ignore[attr-defined]
        return str(conn.execute(text("SHOW autovacuum")).scalar_one()) == "on"


def vacuum(ledger: Ledger) -> float:
    """VACUUM (ANALYZE) the whole scratch database, as autovacuum would have; its seconds."""
    begun = time.perf_counter()
    with ledger.store.engine.connect() as conn:  # type: ignore[attr-defined]
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM (ANALYZE)"))
    return time.perf_counter() - begun


def time_three_writes(ledger: Ledger, jobs: int = 100, repeats: int = 7) -> float:
    """Median milliseconds for `jobs` jobs' three writes (decisions, claims, outcomes)."""
    rng = random.Random(7)
    found = []
    for _ in range(repeats):
        ledger.store.make_partitions(PARTITIONS_AHEAD)  # (a small stage's may run out)
        begun = time.perf_counter()
        three_writes(ledger, 0, jobs, rng)
        found.append(1000 * (time.perf_counter() - begun))
    found.sort()
    return found[len(found) // 2]


_NEXT_BOUNDARY = (
    "SELECT min(p.upper) - outcomes_written_position() - 1 FROM ledger_partitions p"
    " WHERE p.upper >= outcomes_written_position() + 1"
)


def align(ledger: Ledger, filled: Filled, rng: random.Random | None = None) -> None:
    """Pad the ledger to the next boundary of its ranges with refused jobs (one event each,
    ended at once), so that no job has events on both sides of it: the quiet moment an archive
    needs to cut there (every job of an archive ends inside it; the fill's batches keep ~500
    jobs in flight, so no other boundary is clean). Then `filled.cut` is now."""
    rng = rng or random.Random(4)
    while True:
        ledger.store.make_partitions(PARTITIONS_AHEAD)
        with ledger.store.connection() as conn:  # type: ignore[attr-defined]
            left = int(conn.execute(text(_NEXT_BOUNDARY)).scalar_one())
        if left == 0:
            break
        count = min(BATCH, left)
        error = ErrorInfo(code=Code.INPUT_MISSING, message="padding to a range boundary")
        refused = [
            JobAppend(
                new_id(),
                [
                    NewEvent(
                        payload=JobRefused(
                            account=ACCOUNTS[n % len(ACCOUNTS)],
                            tool=TOOLS[0],
                            args={"issue_ref": f"P-{n}"},
                            error=error,
                        ),
                        actor="token-bench",
                    )
                ],
                None,
                notify=False,
            )
            for n in range(count)
        ]
        _checked(ledger.store.append_jobs(refused))
        filled.padding += count
    ledger.store.sequence()
    filled.cut = datetime.now(UTC)

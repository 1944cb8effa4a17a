"""Where an agent's call goes (bench.agents, bench.growth): each timed call's moments as the
agent saw them, beside its job's events' `recorded_at`, split into phases."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ledger.events import job_stream
from ledger.runtime.ledger import open_ledger


@dataclass(frozen=True)
class Timed:
    """One call as its agent saw it (wall-clock seconds, comparable with events' times)."""

    job_id: str
    posted: float  # the POST sent
    answered: float  # its 202 read
    seen: float  # the terminal envelope read


CONFIRMED = "dispatch.confirmed"  # the outbox's `confirmed_at` for the job's message
WITH_CONFIRMATION = "calls whose message's confirmation was recorded (the split's)"

PHASES = (  # (name, from, to): what the agent saw and what the events' times say
    ("POST sent -> decision recorded", "posted", "job.accepted"),
    ("decision -> 202 read by the agent", "job.accepted", "answered"),
    ("decision -> claimed by a worker", "job.accepted", "work.started"),
    # ... split where the outbox saw the broker's confirm of the job's message (its record's
    # `confirmed_at`): the hand-off, the publish and the broker's disk, then the rest. The
    # broker delivers before it confirms, so a worker may claim first (a negative second part).
    ("  decision -> broker's confirm seen by the outbox", "job.accepted", CONFIRMED),
    ("  confirm seen -> claimed (< 0: claimed first)", CONFIRMED, "work.started"),
    ("claimed -> outcome recorded", "work.started", "work.succeeded"),
    ("outcome -> terminal envelope read", "work.succeeded", "seen"),
)


TAIL = 0.01  # the slowest share of calls whose phases are shown apart (issue 48: the tail)


def phases(url: str, timed: Sequence[Timed], slowest: float | None = None) -> dict[str, float]:
    """Median milliseconds of each phase of a call, from the agent's clock, the events'
    `recorded_at` (built in the API and the worker, on this machine's clock) and the outbox's
    record of when the broker confirmed the job's message: where a call's time goes. The
    phases from the decision overlap (the 202 travels while the job is queued). With
    `slowest` (a share, e.g. 0.01), only the slowest calls by the agent's clock: where the
    tail's time goes."""
    if slowest is not None:
        keep = max(1, round(len(timed) * slowest))
        timed = sorted(timed, key=lambda t: t.seen - t.posted)[-keep:]
    moments: dict[str, dict[str, float]] = {t.job_id: {} for t in timed}
    with open_ledger(url, pool_size=1) as ledger:
        # Each timed job's own stream: on a grown ledger (bench.growth) every event is millions.
        for job_id, seen in moments.items():
            for event in ledger.store.read_stream(job_stream(job_id)):
                seen[event.type] = event.recorded_at.timestamp()
            with ledger.store.reading() as reads:  # none where its record was pruned
                dispatch = reads.dispatch_state(job_id)
            if dispatch is not None:
                seen[CONFIRMED] = dispatch.confirmed_at.timestamp()
    for t in timed:
        moments[t.job_id] |= {"posted": t.posted, "answered": t.answered, "seen": t.seen}
    medians = {
        name: 1000 * statistics.median(spans)
        for name, begin, end in PHASES
        if (spans := [m[end] - m[begin] for m in moments.values() if begin in m and end in m])
    }
    # The outbox records a confirmation only for a job still open when its group is written
    # (every 0.1 s): a quick call's job has ended by then, so the split covers the others.
    medians[WITH_CONFIRMATION] = sum(1 for m in moments.values() if CONFIRMED in m)
    if slowest is not None:
        medians["whole call"] = 1000 * statistics.median(t.seen - t.posted for t in timed)
        for name, _, _ in CHAIN:  # in how many of these calls each phase was the longest
            medians[f"longest in (calls): {name}"] = sum(
                1 for m in moments.values() if _longest(m) == name
            )
    return medians


# End to end, one after another (the 202's way and the claim's split overlap the others).
CHAIN = tuple(p for p in PHASES if not p[0].startswith(("decision -> 202", "  ")))


def _longest(moments: dict[str, float]) -> str | None:
    spans = {n: moments[e] - moments[b] for n, b, e in CHAIN if b in moments and e in moments}
    return max(spans, key=lambda n: spans[n]) if spans else None

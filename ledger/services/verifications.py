"""A verification's outcome in one line, its record, and the last one recorded.

`outcomes audit verify` records what it checked when it ends (`record`); the console's audit
page, `outcomes status` and `/metrics` show the last record (`last`: one index read). None of
them verifies anything: a whole-ledger verification is work for a command, not for the API.
"""

from __future__ import annotations

from ledger.chain import Problem
from ledger.clock import now
from ledger.runtime.ledger import Ledger
from ledger.services.verify_passes import Verification
from ledger.verification_record import FULL, SCOPES, VerificationRecord, who_verifies


def failure(found: Verification) -> str | None:
    """The one-line reason to exit non-zero, or None when everything verified."""
    first = first_of(found.chain.problems)
    if first is not None:
        where = f"position {first.position}" if first.position is not None else first.stream_id
        return f"ledger broken at {where}: {first.message}"
    for checked in found.digests:
        first = first_of(checked.report.problems)
        if first is not None:
            return f"ledger no longer extends digest {checked.source}: {first.message}"
    models = found.read_models
    if models.problems:
        more = models.problems_total - 1
        also = f" (and {more} more read-model problems)" if more else ""
        return f"read model {models.problems[0].message}{also}"
    return None


def first_of(problems: list[Problem]) -> Problem | None:
    """The problem at the lowest position (those without one come after)."""
    located = [p for p in problems if p.position is not None]
    if located:
        return min(located, key=lambda p: p.position or 0)
    return problems[0] if problems else None


def record(
    ledger: Ledger,
    found: Verification,
    verified_by: str | None,
    with_digest: bool,
    scope: str = FULL,
) -> VerificationRecord:
    """Keep what `found` checked and found (`verified_by`: `--by`, else user@host; `scope`:
    what it covered, one of `verification_record.SCOPES`)."""
    if scope not in SCOPES:
        raise ValueError(f"scope {scope!r} is none of {', '.join(SCOPES)}")
    chain = found.chain
    problems = (
        chain.problems_total
        + found.read_models.problems_total
        + sum(d.report.problems_total for d in found.digests)
    )
    finished = found.finished_at or now()
    kept = VerificationRecord(
        started_at=found.started_at or finished,
        finished_at=finished,
        first_position=chain.first_position,
        last_position=chain.last_position,
        events=chain.events_checked,
        streams=chain.streams_checked,
        ok=found.ok,
        problems=problems,
        first_problem=failure(found),
        verified_by=who_verifies(verified_by),
        with_digest=with_digest,
        scope=scope,
    )
    with ledger.store.transaction() as tx:
        tx.record_verification(kept)
    return kept


def last(ledger: Ledger, samples: bool = True) -> VerificationRecord | None:
    """The newest recorded verification, or None (one read by the primary key's index); with
    `samples` False, the newest that checked a whole range (not a `--sample`)."""
    with ledger.store.quick_read() as reads:
        return reads.last_verification(samples)

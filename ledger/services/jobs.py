"""Reading jobs as a caller may see them: one job (the one rule for who sees what), its
events, the jobs that changed after a cursor, and what long-polls watch.

Another account's job is indistinguishable from a job that does not exist: both are
JobNotFoundError. `caller=None` is the operator at the CLI, who sees every account.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ledger import doorbell, queueing
from ledger.access import DETAIL_ROLES, may_see
from ledger.chain import stream_links
from ledger.clock import now
from ledger.cursor import cursor_key, issue_cursor, position_of
from ledger.doorbell import Bell
from ledger.errors import JobArchivedError, JobNotFoundError, NotAuthenticatedError
from ledger.events import job_stream
from ledger.job_view import JobView, Waiting
from ledger.persistence.base import Listener, LoopReads, OnConnect, OnJobs
from ledger.public import job_event, public_event
from ledger.queries import JobFilter
from ledger.queueing import WAITING
from ledger.runtime.ledger import Ledger
from ledger.runtime.thread_hop import in_thread
from ledger.services.tokens import AdmittedTokens
from ledger.token_view import TokenView


def job_key(job_id: str) -> str | None:
    """The canonical id, or None for a string that cannot be a job id."""
    try:
        return str(uuid.UUID(job_id))
    except ValueError:
        return None


def get(ledger: Ledger, job_id: str, caller: TokenView | None = None) -> JobView:
    key = job_key(job_id)
    if key is None:
        raise JobNotFoundError(job_id)
    view, _ = ledger.store.read_job(key)
    return _visible(caller, view, job_id, ledger)


def get_admitted(
    ledger: Ledger, admitted: AdmittedTokens, token: str, job_id: str
) -> tuple[TokenView, JobView]:
    """`get_as` for a process that keeps the tokens it admitted: the token's view from
    `admitted` (read at the ledger only the first time), and whether it still stands asked in
    the job's own read, so a revoked token is refused on its next request, by every process,
    at the cost of one round trip in all."""
    caller = admitted.admit(token)
    view, stands = ledger.store.read_job(job_key(job_id) or "", caller.token_id)
    if view is None and stands:  # (a miss only: the hot path takes no extra read)
        raise not_found(ledger, caller, job_id)
    return caller, _standing(admitted, token, caller, view, stands, job_id)


async def get_admitted_on_loop(
    ledger: Ledger,
    admitted: AdmittedTokens,
    token: str,
    job_id: str,
    reads: LoopReads | None,
) -> tuple[TokenView, JobView]:
    """`get_admitted` with no thread hop where it can: on the loop's `reads` (Postgres) for a
    token this process admitted before. A token it never saw is read on a thread, so that
    guesses never hold up the loop."""
    caller = admitted.cached(token)
    if reads is None or caller is None:
        return await in_thread(get_admitted, ledger, admitted, token, job_id)
    view, stands = await reads.read_job(job_key(job_id) or "", caller.token_id)
    if view is None and stands:
        raise await in_thread(not_found, ledger, caller, job_id)
    return caller, _standing(admitted, token, caller, view, stands, job_id)


async def get_on_loop(
    ledger: Ledger, job_id: str, caller: TokenView, reads: LoopReads | None
) -> JobView:
    """`get` on the loop's `reads` where there are some, else on a thread."""
    key = job_key(job_id)
    if reads is None or key is None:
        return await in_thread(get, ledger, job_id, caller)
    view, _ = await reads.read_job(key)
    if view is None:
        raise await in_thread(not_found, ledger, caller, job_id)
    return _visible(caller, view, job_id)


def _standing(
    admitted: AdmittedTokens,
    token: str,
    caller: TokenView,
    view: JobView | None,
    stands: bool,
    job_id: str,
) -> JobView:
    if not stands:  # revoked since this process admitted it
        admitted.forget(token)
        raise NotAuthenticatedError()
    return _visible(caller, view, job_id)


def waiting_of(ledger: Ledger, view: JobView) -> Waiting | None:
    """How long a waiting job has waited and whether its message is confirmed (one more
    read, for waiting jobs only); None for a job that does not wait."""
    if view.terminal or view.status not in WAITING:
        return None
    with ledger.store.quick_read() as reads:
        dispatch = reads.dispatch_state(view.job_id)
    return queueing.waiting(view, dispatch, now())


def _visible(
    caller: TokenView | None, view: JobView | None, job_id: str, ledger: Ledger | None = None
) -> JobView:
    if view is None and ledger is not None:
        raise not_found(ledger, caller, job_id)
    if view is None or (caller is not None and not may_see(caller.account, view.account)):
        raise JobNotFoundError(job_id)
    return view


def not_found(ledger: Ledger, caller: TokenView | None, job_id: str) -> JobNotFoundError:
    """Why a job is not in the database: archived (JobArchivedError, for a caller who may see
    its account: `archived_jobs` keeps each archived job's account for that), or unknown and
    another account's alike (JobNotFoundError)."""
    key = job_key(job_id)
    archived = ledger.store.archived_job(key) if key else None
    if archived is not None and (caller is None or may_see(caller.account, archived.account)):
        return JobArchivedError(job_id, archived.archive_id, archived.archived_at)
    return JobNotFoundError(job_id)


def events(ledger: Ledger, job_id: str, caller: TokenView | None = None) -> list[dict[str, Any]]:
    """The job's events, oldest first, as its own page shows them."""
    key = job_key(job_id)
    recorded = ledger.store.read_stream(job_stream(key)) if key else []
    if not recorded:
        raise not_found(ledger, caller, job_id)
    if caller is not None and not may_see(caller.account, str(recorded[0].data.get("account"))):
        raise JobNotFoundError(job_id)
    staff = caller is None or caller.role in DETAIL_ROLES
    return [job_event(event, staff=staff) for event in recorded]


def listing(
    ledger: Ledger,
    account: str | None = None,
    after: int = 0,
    limit: int = 100,
    *,
    before: int | None = None,
    newest_first: bool = False,
) -> list[JobView]:
    """Jobs of one account (None: every account) that changed after `after` (and before
    `before`), in ledger_position order, newest first when asked."""
    where = JobFilter(account, after, limit, before, newest_first)
    with ledger.store.quick_read() as reads:
        return reads.jobs(where)


def search(ledger: Ledger, where: JobFilter) -> list[JobView]:
    """Jobs matching every field the filter sets (the console's list, newest first when
    asked), as one indexed read; the caller scopes `where.account` to what it may see."""
    with ledger.store.quick_read() as reads:
        return reads.jobs(where)


@dataclass(frozen=True)
class TimelineEntry:
    """One event of a job as staff read it (`ledger.public`: argument values withheld, hashes
    for auditors only) and whether its own link of the job's hash chain verifies."""

    event: dict[str, Any]
    problems: list[str]

    @property
    def verified(self) -> bool:
        return not self.problems


def timeline(ledger: Ledger, job_id: str, caller: TokenView) -> tuple[JobView, list[TimelineEntry]]:
    """A job and its events, oldest first, each with its link checked (operators and
    auditors: `caller` must hold one of DETAIL_ROLES). Read in one view of the ledger, so the
    events are the ones the job's view was folded from."""
    if caller.role not in DETAIL_ROLES:
        raise JobNotFoundError(job_id)
    key = job_key(job_id)
    if key is None:
        raise JobNotFoundError(job_id)
    with ledger.store.reading() as reads:
        view = _visible(caller, reads.job(key), job_id, ledger)
        recorded = reads.read_stream(job_stream(key))
    hashes = caller.role == "auditor"  # the hashes cover the stored arguments: a guessing oracle
    return view, [
        TimelineEntry(public_event(event, hashes=hashes), [p.message for p in problems])
        for event, problems in stream_links(recorded)
    ]


def changes(
    ledger: Ledger, account: str | None, after: str | None = None, limit: int = 100
) -> list[tuple[JobView, str]]:
    """`listing` for callers of the HTTP feed: each job with an opaque cursor (`ledger.cursor`)
    instead of its position, which would tell them the volume of the whole ledger."""
    key = cursor_key(ledger.request_key)
    start = position_of(after, key) if after is not None else 0
    return [
        (view, issue_cursor(view.ledger_position, key))
        for view in listing(ledger, account, start, limit)
    ]


def positions(ledger: Ledger, job_ids: Sequence[str]) -> dict[str, int]:
    """Each known job's ledger_position: what long-polls compare to decide to re-read."""
    with ledger.store.quick_read() as reads:
        return reads.job_positions(job_ids)


def listener(ledger: Ledger, on_jobs: OnJobs, on_connect: OnConnect) -> Listener | None:
    """Pushed job changes, where the store has them (Postgres); None: poll `positions`."""
    return ledger.store.job_listener(on_jobs, on_connect)


def changes_bell(ledger: Ledger) -> Bell | None:
    """A bell that rings when another process of this machine commits a change to the ledger,
    where the store has bells (SQLite; `ledger.doorbell`); None: poll at the usual pace."""
    return doorbell.listen(ledger.store.changes_bells())

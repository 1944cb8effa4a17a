"""`outcomes rebuild`, online: every read model (jobs, brakes, tokens, webhooks) made again
from the events, a page of streams at a time, while agents keep submitting and polling.

A page is a short transaction over `PAGE` streams in key order:
1. it takes the rebuild's own lock (two rebuilds never interleave their pages) and checks
   that this run still owns the progress row (a second rebuild takes it over: this one stops);
2. it takes the page's streams' locks, the ones every append takes, in the same key order:
   from then on no append to them lands, and every append committed before is visible;
3. it reads their events (after the locks: so the newest), folds them with the read models'
   own definitions (`ledger.read_models`), reads the stored rows by key, and writes only the
   rows that differ: inserts the missing, updates the different in place;
4. it records the last stream done with the same commit.
Writes to the page's streams wait for that one commit; writes to any other stream never
wait. A reader never sees a row missing: rows are updated in place, never deleted and put
back. Before the pages, the rows no event makes are deleted (the database finds them, and
asks again in the statement that deletes: a row whose first events commit meanwhile stays),
so that none holds a unique key a page's insert needs. Stopped anywhere, a rebuild resumes
after the last page it committed (`restart` begins again from the first stream).

A stream written during the rebuild: before its page, the append's own projection keeps its
row, and the page reads it with the newest events; after its page, likewise; during its page,
the append waits for the page's commit and then writes its row on top of the rebuilt one.
An append writes the row it folded from the view it read before (job rows are not re-folded
on write: docs/integrity.md), so a row wrong before the rebuild and written by an append that
read it before its page was committed can stay wrong; `outcomes audit verify` says so.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from pydantic import BaseModel

from ledger.clock import now
from ledger.errors import RebuildTakenOverError, StorageError
from ledger.persistence.base import Store, Writes
from ledger.read_model_check import fold_event, row_differences
from ledger.read_models import READ_MODELS, ReadModel
from ledger.rebuild_state import PageDone, RebuildProgress, RebuildReport
from ledger.runtime.ledger import Ledger

Progress = Callable[[int], None]  # told how many events a page replayed
PAGE = 200  # streams a page: the longest any append waits is one page's transaction
LOCK = ("read-model-rebuild",)  # held by each page: two rebuilds' pages never interleave
ATTEMPTS = 3  # a page is tried again after a storage failure (a deadlock with an odd writer)


def rebuild(
    ledger: Ledger,
    progress: Progress | None = None,
    restart: bool = False,
    page: int = PAGE,
) -> RebuildReport:
    """Rebuild every read model from the events, online and resumable (see the module)."""
    store = ledger.store
    run = str(uuid.uuid4())
    with store.transaction() as tx:
        tx.lock(*LOCK)
        held = tx.rebuild_progress()
        resume = held is not None and held.finished_at is None and not restart
        state = held.adopted(run, now()) if held and resume else _begin(run)
        tx.save_rebuild_progress(state)
    report = RebuildReport(
        resumed_after=state.after_stream if resume else None, started_at=state.started_at
    )
    # First the rows no event makes: a ghost may hold a unique key (an idempotency key, a
    # token's hash) that a row the pages insert needs.
    report.deleted += _rows_without_events(store, run, page)
    after = state.after_stream
    while True:
        with store.reading() as reads:
            ids = reads.stream_ids(after, page)
        if not ids:
            break
        done, unfoldable = _retried(store, run, ids)
        report.add_page(done)
        for line in unfoldable:  # left as they are: `audit verify` names them too
            report.add_unfoldable(line)
        after = ids[-1]
        if progress is not None:
            progress(done.events)
    with store.transaction() as tx:
        tx.lock(*LOCK)
        tx.save_rebuild_progress(replace(_owned(tx, run), finished_at=now(), updated_at=now()))
    return report


def _begin(run: str) -> RebuildProgress:
    return replace(RebuildProgress.begin(now()), run_id=run)


def _owned(tx: Writes, run: str) -> RebuildProgress:
    held = tx.rebuild_progress()
    if held is None or held.run_id != run:
        raise RebuildTakenOverError(
            "another `outcomes rebuild` took over this rebuild; it goes on where this one stopped"
        )
    return held


def _retried(store: Store, run: str, ids: Sequence[str]) -> tuple[PageDone, list[str]]:
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return _page(store, run, ids)
        except StorageError:
            if attempt == ATTEMPTS:
                raise
    raise AssertionError("unreachable")


def _page(store: Store, run: str, ids: Sequence[str]) -> tuple[PageDone, list[str]]:
    with store.transaction() as tx:
        tx.lock(*LOCK)
        state = _owned(tx, run)
        tx.lock_streams(ids)
        found = tx.events_of_streams(ids)
        views: dict[tuple[str, str], BaseModel] = {}
        broken: set[tuple[str, str]] = set()
        unfoldable = []
        for event in found:
            problem = fold_event(views, broken, event)
            if problem is not None:
                unfoldable.append(problem.message)
        # Where each job's stream begins, which the append function's lookups start from (a
        # row without it is looked for in every partition). Not folded: set on the rows written.
        firsts: dict[str, int] = {}
        for event in found:
            firsts.setdefault(event.stream_id, event.position)
        inserted = updated = 0
        for model in READ_MODELS:
            wanted = {
                key: model.row(key, view)
                for (table, key), view in views.items()
                if table == model.table and (table, key) not in broken
            }
            if not wanted:
                continue
            stored = tx.read_model_rows_by_key(model.table, sorted(wanted))
            have: dict[str, dict[str, Any]] = {str(r[model.key_column]): r for r in stored}
            inserts = [row for key, row in wanted.items() if key not in have]
            updates = [
                row
                for key, row in wanted.items()
                if key in have and any(row_differences(model, key, have[key], row))
            ]
            if model.table == "jobs":
                inserts = [_begun(row, model, firsts) for row in inserts]
                updates = [_begun(row, model, firsts) for row in updates]
            tx.write_read_model_rows(model.table, inserts, updates)
            inserted, updated = inserted + len(inserts), updated + len(updates)
        done = PageDone(ids[-1], len(ids), len(found), inserted, updated)
        tx.save_rebuild_progress(state.advanced(done, now()))
    return done, unfoldable


def _begun(row: dict[str, Any], model: ReadModel[Any], firsts: dict[str, int]) -> dict[str, Any]:
    return row | {"first_position": firsts[model.home_stream(row[model.key_column])]}


def _rows_without_events(store: Store, run: str, page: int) -> int:
    """Delete the rows no event makes, a page of keys at a time (found by the database)."""
    deleted = 0
    for model in READ_MODELS:
        after: str | None = None
        while True:
            with store.transaction() as tx:
                tx.lock(*LOCK)
                state = _owned(tx, run)
                keys = tx.rows_without_events(model.table, after, page)
                if not keys:
                    break
                gone = tx.delete_rows_without_events(model.table, keys)
                tx.save_rebuild_progress(state.advanced(PageDone(deleted=gone), now()))
            deleted += gone
            after = keys[-1]
    return deleted

"""`audit verify`, `audit digest` and `outcomes rebuild` hold a bounded window whatever the
ledger's size: the memory Python allocates at its peak (tracemalloc: every allocation counted,
not the noisy RSS of a shared machine) is the same for a ledger ten times larger, on SQLite and
Postgres. A fold of the whole ledger in memory (what verify and rebuild did before) grows ten
times with it and fails here."""

from __future__ import annotations

import tempfile
import tracemalloc
from collections.abc import Callable

from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services import audit
from ledger.services import rebuild as rebuild_service
from tests.ledger_fill import fill

SMALL = 250  # jobs; the large ledger holds ten times as many
PAGE = 60  # events (verify) and streams (rebuild) a page: far fewer than either ledger holds
# Allowed growth from the small ledger's peak to the large one's: generous, and far below the
# tenfold growth of anything that holds every stream.
GROWTH = 1.5
SLACK = 256 * 1024  # bytes: a page's rows differ in size a little between runs


def peak(work: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def digest_to_file(ledger: Ledger) -> None:
    with tempfile.TemporaryFile() as out:
        audit.write_digest(ledger, out)


def test_verify_digest_and_rebuild_hold_the_same_at_ten_times_the_ledger(
    store: SqlStore,
) -> None:
    ledger = Ledger(store)
    fill(store, SMALL)
    runs: dict[str, Callable[[], object]] = {
        "verify": lambda: audit.verify_all(ledger, page=PAGE),
        "digest": lambda: digest_to_file(ledger),
        "rebuild": lambda: rebuild_service.rebuild(ledger, restart=True, page=PAGE),
    }
    for run in runs.values():
        run()  # warm: statement caches, the schema's reflection, imports
    small = {name: peak(run) for name, run in runs.items()}
    fill(store, SMALL * 9)
    assert audit.verify_all(ledger, page=PAGE).ok  # the larger ledger is whole
    large = {name: peak(run) for name, run in runs.items()}
    for name in runs:
        assert large[name] <= small[name] * GROWTH + SLACK, (name, small[name], large[name])

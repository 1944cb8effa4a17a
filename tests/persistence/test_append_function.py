"""The server-side append (migrations 0004, 0008, 0009, 0011) takes the same locks as the
Python side: the same advisory-lock keys, so appends, claims and `brake pull` stay ordered
whichever path writes."""

from __future__ import annotations

import importlib.util
from types import ModuleType

import pytest

from ledger.persistence.locks import BRAKE_LOCK_KEY
from ledger.persistence.migrate import SCRIPT_LOCATION
from ledger.persistence.sql_store import APPEND_LOCK_KEY


def migration(name: str) -> ModuleType:
    path = SCRIPT_LOCATION / "versions" / name
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "name", ["0004_append_jobs.py", "0008_append_cpu.py", "0009_idempotency_probe.py"]
)
def test_the_function_locks_with_the_ledgers_own_keys(name: str) -> None:
    append = migration(name)
    assert (append.APPEND_LOCK_KEY, append.BRAKE_LOCK_KEY) == (APPEND_LOCK_KEY, BRAKE_LOCK_KEY)
    body = append.FUNCTION
    # The brakes lock first, then the append lock: the order `brake pull` takes them in.
    assert body.index(f"lock_shared({BRAKE_LOCK_KEY})") < body.index(f"lock({APPEND_LOCK_KEY})")


CURRENT = SCRIPT_LOCATION / "functions" / "outcomes_append_jobs.sql"


def test_the_newest_migration_runs_the_current_function_whole() -> None:
    """The function lives whole in one file; the newest migration that creates it runs its own
    copy of that file, so changing the file without a migration fails here."""
    snapshots = sorted((SCRIPT_LOCATION / "versions").glob("*_outcomes_append_jobs.sql"))
    assert snapshots, "no migration snapshots the append function"
    assert snapshots[-1].read_text() == CURRENT.read_text()
    newest = max(p.name for p in (SCRIPT_LOCATION / "versions").glob("[0-9]*.py"))
    assert snapshots[-1].name[:4] <= newest[:4]
    body = CURRENT.read_text()
    # Since 0014 no writer takes a lock every other writer waits for: the append lock is
    # shared (only a rebuild takes it exclusive), after the brakes lock, as `brake pull` does.
    assert f"lock({APPEND_LOCK_KEY})" not in body
    shared = f"lock_shared({APPEND_LOCK_KEY})"
    assert body.index(f"lock_shared({BRAKE_LOCK_KEY})") < body.index(shared)
    # The streams', keys' and tokens' locks come after it, in key order; a revoked token is
    # asked after them: a revocation (which takes its token's stream lock) is then either
    # committed and seen, or not yet begun (its row in `tokens` since 0025).
    assert body.index(shared) < body.index("ORDER BY k.key") < body.index("FROM tokens t")
    # Nothing links at write: the sequencer does, after commit.
    assert "ledger_hash" not in body.split("BEGIN", 1)[1]


def test_the_function_reads_the_newest_link_under_the_append_lock() -> None:
    """0008 links the events it inserts to the newest row's `ledger_hash`: only under the
    append lock is that row the previous one."""
    body = migration("0008_append_cpu.py").FUNCTION
    newest = "SELECT e.ledger_hash INTO link FROM events e ORDER BY e.position DESC LIMIT 1"
    assert body.count(newest) == 1
    assert body.index(f"lock({APPEND_LOCK_KEY})") < body.index(newest)

"""The server-side append (migration 0004) takes the same locks as the Python side: the same
advisory-lock keys, so appends, claims and `brake pull` stay ordered whichever path writes."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from ledger.persistence.locks import BRAKE_LOCK_KEY
from ledger.persistence.migrate import SCRIPT_LOCATION
from ledger.persistence.store import APPEND_LOCK_KEY


def migration(name: str) -> ModuleType:
    path = SCRIPT_LOCATION / "versions" / name
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_function_locks_with_the_ledgers_own_keys() -> None:
    append = migration("0004_append_jobs.py")
    assert (append.APPEND_LOCK_KEY, append.BRAKE_LOCK_KEY) == (APPEND_LOCK_KEY, BRAKE_LOCK_KEY)
    body = append.FUNCTION
    # The brakes lock first, then the append lock: the order `brake pull` takes them in.
    assert body.index(f"lock_shared({BRAKE_LOCK_KEY})") < body.index(f"lock({APPEND_LOCK_KEY})")

"""An open ledger: what the adapters hold and hand to every use case.

Opened once per process or command (`open_ledger`) and closed when done (it is a context
manager), so connection pools are made and released in one place.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import TracebackType
from typing import Self

from ledger.batching import GroupCommit
from ledger.persistence.appends import JobAppend, JobAppended
from ledger.persistence.base import Store
from ledger.persistence.open import open_store
from ledger.settings import load_settings
from ledger.telemetry import telemetry


class Ledger:
    def __init__(self, store: Store) -> None:
        self.store = store
        # Job appends from any thread of this process commit in groups: one transaction and
        # one commit for whatever gathered while the previous group was being written.
        self.appends: GroupCommit[JobAppend, JobAppended] = GroupCommit(self._append_jobs)
        self._request_key: bytes | None = None

    def _append_jobs(self, items: Sequence[JobAppend]) -> list[JobAppended]:
        start = time.perf_counter()
        done = self.store.append_jobs(items)
        telemetry().appended(time.perf_counter() - start, len(items))
        return done

    @property
    def request_key(self) -> bytes:
        """The key request fingerprints are HMACs under (read once, it never changes)."""
        if self._request_key is None:
            self._request_key = self.store.request_key()
        return self._request_key

    @property
    def dialect(self) -> str:
        """ "postgresql", "sqlite" or "memory"."""
        return self.store.dialect

    def describe(self) -> str:
        """Where the ledger lives, fit to print (no password)."""
        return self.store.describe()

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def open_ledger(url: str | None = None, *, pool_size: int = 5) -> Ledger:
    """The ledger at `url` (default: OUTCOMES_DATABASE_URL, else the embedded SQLite file)."""
    return Ledger(open_store(url or load_settings().database_url, pool_size=pool_size))

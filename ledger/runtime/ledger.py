"""An open ledger: what the adapters hold and hand to every use case.

Opened once per process or command (`open_ledger`) and closed when done (it is a context
manager), so connection pools are made and released in one place.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import cached_property
from types import TracebackType
from typing import Literal, Self

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ledger.fairness import Limits
from ledger.keyring import Keyring, load_keyring
from ledger.persistence.appends import JobAppend, JobAppended
from ledger.persistence.base import Store
from ledger.persistence.open import open_store
from ledger.receipts import configured_signing_key
from ledger.runtime.batching import GroupCommit
from ledger.settings import Settings, load_settings
from ledger.telemetry import telemetry

FROM_SETTINGS: Literal["from settings"] = "from settings"


class Ledger:
    def __init__(
        self, store: Store, keyring: Keyring | Literal["from settings"] | None = FROM_SETTINGS
    ) -> None:
        self.store = store
        # Job appends from any thread of this process commit in groups: one transaction and
        # one commit for whatever gathered while the previous group was being written.
        self.appends: GroupCommit[JobAppend, JobAppended] = GroupCommit(self._append_jobs)
        self._request_key: bytes | None = None
        # FROM_SETTINGS: loaded when first needed; None: this ledger has no secrets key.
        self._keyring = keyring
        self._limits: Limits | None = None  # read from the settings when first needed

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

    @cached_property
    def settings(self) -> Settings:
        """The process's settings, read once for this ledger: every use case that needs one
        reads it here, never the environment again."""
        return load_settings()

    @cached_property
    def signing_key(self) -> Ed25519PrivateKey | None:
        """The key tree heads are signed with (`OUTCOMES_SIGNING_KEY`), parsed once."""
        return configured_signing_key(self.settings.signing_key)

    @property
    def secrets(self) -> Keyring | None:
        """The keys that seal and open declared secret arguments (`ledger.keyring`): kept
        outside the database; None when this ledger has none configured."""
        if self._keyring == FROM_SETTINGS:
            settings = self.settings
            self._keyring = load_keyring(
                settings.secrets_key,
                settings.secrets_key_file,
                self.store.local_folder(),
                ephemeral=self.store.dialect == "memory",
            )
        assert not isinstance(self._keyring, str)
        return self._keyring

    @property
    def limits(self) -> Limits:
        """The per-account fairness limits (`ledger.fairness`), read once from the settings."""
        if self._limits is None:
            settings = self.settings
            self._limits = Limits(
                rate_per_s=settings.rate_limit_per_s,
                burst=settings.rate_limit_burst,
                concurrency=settings.account_concurrency,
                window=settings.account_window,
            )
        return self._limits

    @limits.setter
    def limits(self, limits: Limits) -> None:
        self._limits = limits

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

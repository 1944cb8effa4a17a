"""The store's job reads for the event loop serving now (`Store.loop_job_reads`: Postgres),
for the API's GET: made on first use and again if the loop changed (each test client runs a
loop of its own); closed with the app, on its loop."""

from __future__ import annotations

import asyncio

from ledger.persistence.base import LoopReads
from ledger.runtime.ledger import Ledger


class LoopReadsHolder:
    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._reads: LoopReads | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def current(self) -> LoopReads | None:
        """This loop's reads; None where the store reads on threads only."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            # A former loop's connections went with it: they cannot be used (or closed) here.
            self._reads, self._loop = self._ledger.store.loop_job_reads(), loop
        return self._reads

    async def close(self) -> None:
        reads, self._reads, self._loop = self._reads, None, None
        if reads is not None:
            await reads.close()

"""`audit verify`'s pass in ledger order: one fold over the events by position, in O(1) state.

The fold counts the events and the range it read, and hands each event to its checks, each a
small object with its own state (the previous link, the previous position, a digest's span):
the ledger-wide chain, the dense positions and each digest's span are checks. Another check
(a Merkle tree's leaves over ledger order, say) joins the same pass without another read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from ledger.archive import ArchiveBase
from ledger.chain import (
    Checkpoint,
    Link,
    dense_problem,
    digest_span_problems,
    kept_problem,
    kept_whole_problems,
    ledger_link_problem,
)
from ledger.problem_log import ProblemLog


class ChainStart(Protocol):
    """Where a pass in ledger order picks the chain up: an archive's end (`ArchiveBase`), or
    the position of a tree head (`verify --since`) and the link stored there."""

    @property
    def position(self) -> int: ...

    @property
    def ledger_hash(self) -> str | None: ...


class OrderCheck(Protocol):
    def see(self, link: Link) -> None:
        """The next event in ledger order."""

    def finish(self) -> None:
        """The pass is over."""


class LedgerChain:
    """Each position's ledger-wide link follows the previous position's (after an archive,
    from the archive's last link: `base`)."""

    def __init__(self, problems: ProblemLog, base: ChainStart | None = None) -> None:
        self.problems = problems
        self._after = base.position if base else 0
        self._prev: str | None = base.ledger_hash if base else None

    def see(self, link: Link) -> None:
        if link.position <= self._after:
            return  # kept below an archive's end: `KeptBelowCut` judges it
        self.problems.add(ledger_link_problem(link, self._prev))
        self._prev = link.ledger_hash

    def finish(self) -> None:
        return None


class DensePositions:
    """From `dense_from` (the sequencer's first position) on, positions follow each other."""

    def __init__(
        self, problems: ProblemLog, dense_from: int, base: ChainStart | None = None
    ) -> None:
        self.problems = problems
        self.dense_from = dense_from
        self._after = base.position if base else 0
        self._previous = self._after

    def see(self, link: Link) -> None:
        if link.position <= self._after:
            return
        if link.position >= self.dense_from:
            previous = max(self._previous, self.dense_from - 1)
            self.problems.add(dense_problem(link, previous))
        self._previous = link.position

    def finish(self) -> None:
        return None


class KeptBelowCut:
    """After an archive: the events the database kept below its end (streams that are not
    jobs', whole) are the ones it saw, as many, each stream at least to its head there. Holds
    one version a kept stream (tokens, brakes, webhooks: few, whatever the ledger's size)."""

    def __init__(self, problems: ProblemLog, base: ArchiveBase) -> None:
        self.problems = problems
        self.base = base
        self._kept = 0
        self._versions: dict[str, int] = {}

    def see(self, link: Link) -> None:
        if link.position > self.base.position:
            return
        self._kept += 1
        self.problems.add(kept_problem(link, self.base))
        seen = self._versions.get(link.stream_id, 0)
        self._versions[link.stream_id] = max(seen, link.stream_version)

    def finish(self) -> None:
        self.problems.extend(kept_whole_problems(self.base, self._kept, self._versions))


class DigestSpan:
    """A digest's span, as ledger order holds it now: as many events up to its position, and
    the same ledger-wide link there (which binds every event before it, in order)."""

    def __init__(self, problems: ProblemLog, checkpoint: Checkpoint) -> None:
        self.problems = problems
        self.checkpoint = checkpoint
        self._within = 0
        self._at: str | None = None

    def see(self, link: Link) -> None:
        if link.position <= self.checkpoint.position:
            self._within += 1
            self._at = link.ledger_hash

    def finish(self) -> None:
        self.problems.extend(digest_span_problems(self.checkpoint, self._within, self._at))


class LedgerFold:
    """The pass itself: fed pages of events in position order."""

    def __init__(self, checks: Sequence[OrderCheck]) -> None:
        self.checks = checks
        self.events = 0
        self.first_position: int | None = None
        self.last_position: int | None = None

    def add(self, links: Iterable[Link]) -> None:
        for link in links:
            self.events += 1
            if self.first_position is None:
                self.first_position = link.position
            self.last_position = link.position
            for check in self.checks:
                check.see(link)

    def finish(self) -> None:
        for check in self.checks:
            check.finish()

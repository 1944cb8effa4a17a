"""The chain problems a verification keeps, in bounded memory.

A ledger damaged at every position would otherwise hold a problem per event. The log keeps
the `keep` problems at the lowest positions (so the first broken position is always there)
and the first `keep` that have none (a digest's truncations and counts), and counts the rest.
The two passes of `audit verify` find problems in different orders (ledger order, stream
order); `problems()` gives them back in one: by position, and at one position in the order
one pass over the ledger would have named them (the stream chain, the ledger-wide chain, the
dense positions, the digest), then those without a position in the order they were found.
"""

from __future__ import annotations

import heapq

from ledger.chain import Problem, ProblemKind, VerifyReport

KEEP = 1000
_RANK = {
    ProblemKind.VERSION_GAP: 0,
    ProblemKind.CHAIN_BROKEN: 0,
    ProblemKind.HASH_MISMATCH: 0,
    ProblemKind.LEDGER_CHAIN_BROKEN: 1,
    ProblemKind.POSITION_GAP: 2,
}
_LAST = 3  # the digest's, and anything else placed at a position


class ProblemLog:
    def __init__(self, keep: int = KEEP) -> None:
        self.keep = keep
        self.total = 0
        # A max-heap (keys negated) of the lowest-placed problems kept: its top is dropped
        # first. The sequence number breaks ties, so problems themselves are never compared.
        self._located: list[tuple[int, int, int, Problem]] = []
        self._unlocated: list[Problem] = []
        self._seq = 0

    def add(self, problem: Problem | None) -> None:
        if problem is None:
            return
        self.total += 1
        self._seq += 1
        if problem.position is None:
            if len(self._unlocated) < self.keep:
                self._unlocated.append(problem)
            return
        item = (-problem.position, -_RANK.get(problem.kind, _LAST), -self._seq, problem)
        if len(self._located) < self.keep:
            heapq.heappush(self._located, item)
        elif item > self._located[0]:  # placed before the last one kept
            heapq.heapreplace(self._located, item)

    def extend(self, problems: list[Problem]) -> None:
        for problem in problems:
            self.add(problem)

    def problems(self) -> list[Problem]:
        located = sorted(self._located, reverse=True)  # negated keys: lowest position first
        return [item[3] for item in located] + self._unlocated

    def report(self, events: int, streams: int) -> VerifyReport:
        kept = self.problems()
        return VerifyReport(events, streams, kept, more=self.total - len(kept))

"""`audit verify`'s pass in stream order: every stream's events together, in version order,
read a page at a time (the store's unique index on stream and version gives that order).

Each check keeps one stream's state and lets it go when the next stream begins, so the pass
holds one page and one stream whatever the ledger's size:
- `StreamChain`: each event's hash recomputed and its link to the stream's previous event;
- `DigestHeads`: what a digest saw of each stream (its head, and nothing inserted within its
  span), the digest's own heads looked up by key;
- `read_model_check.StreamModels`: the read models folded and compared, by key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from ledger.chain import Checkpoint, Link, digest_event_problem, digest_truncated, link_problems
from ledger.events import RecordedEvent
from ledger.problem_log import ProblemLog
from ledger.queries import StreamEvent
from ledger.read_model_check import StreamModels

PRESENT_CHUNK = 500  # digest streams asked about at once (the SQL stores' IN list)

# Which of these streams hold an event (sequenced, at or below the position when given).
Present = Callable[[list[str], int | None], set[str]]


class StreamChain:
    """The stream chain: versions follow each other, each prev_hash is the previous event's
    hash, and each event's content still makes its hash. Counts the streams it saw."""

    def __init__(
        self, problems: ProblemLog, continued: Mapping[str, tuple[int, str]] | None = None
    ) -> None:
        self.problems = problems
        self.streams = 0
        # Heads of streams whose earlier events are elsewhere (an earlier archive's files).
        self.continued = continued or {}
        self._stream: str | None = None
        self._head: tuple[int, str] | None = None

    def add(self, event: RecordedEvent) -> None:
        if event.stream_id != self._stream:
            self._stream, self._head = event.stream_id, self.continued.get(event.stream_id)
            self.streams += 1
        self.problems.extend(link_problems(event, self._head))
        self._head = (event.stream_version, event.hash)


@dataclass
class DigestHeads:
    """A digest's heads against the streams: within its span every event is one it saw (no
    later version, no stream it did not name) with the hash it saw at its head, and no stream
    ends before the version it saw. `whole`: a stream's end is its last event anywhere (the
    digest given with `--digest`); otherwise its last within the span (each `--against`)."""

    problems: ProblemLog
    checkpoint: Checkpoint
    present: Present
    whole: bool = True
    _stream: str | None = None
    _seen: int = 0
    _matched: int = 0  # streams of the digest met so far (each once: they come in order)
    _ended: list[str] = field(default_factory=list)

    def add(self, link: Link) -> None:
        if link.stream_id != self._stream:
            self._close()
            self._stream, self._seen = link.stream_id, 0
        within = link.position <= self.checkpoint.position
        if within:
            expected = self.checkpoint.heads.get(link.stream_id)
            self.problems.add(digest_event_problem(link, expected))
        if within or self.whole:
            self._seen = max(self._seen, link.stream_version)

    def finish(self) -> None:
        self._close()
        heads = self.checkpoint.heads
        if self._matched == len(heads):
            return
        # Some streams the digest names never came by: ask which of them exist at all, a
        # chunk at a time, rather than keep a set of every stream met.
        upto = None if self.whole else self.checkpoint.position
        names = sorted(heads)
        for start in range(0, len(names), PRESENT_CHUNK):
            chunk = names[start : start + PRESENT_CHUNK]
            found = self.present(chunk, upto)
            for stream_id in chunk:
                if stream_id not in found:
                    self.problems.add(digest_truncated(stream_id, heads[stream_id][0], 0))

    def _close(self) -> None:
        # A stream with no event in scope (all after the span) is left to `finish`, which
        # asks the store with the same scope: each stream is named once either way.
        expected = self._stream and self.checkpoint.heads.get(self._stream)
        if self._stream is None or not expected or not self._seen:
            return
        self._matched += 1
        if self._seen < expected[0]:
            self.problems.add(digest_truncated(self._stream, expected[0], self._seen))


class StreamPass:
    """The pass: the chain and a digest's heads over the sequenced events, the read models
    over every event (the rows were written with each append, sequenced yet or not)."""

    def __init__(
        self,
        chain: StreamChain,
        digest: DigestHeads | None = None,
        models: StreamModels | None = None,
    ) -> None:
        self.chain = chain
        self.digest = digest
        self.models = models
        self.last: StreamEvent | None = None  # the cursor for the next page

    def add(self, page: Iterable[StreamEvent]) -> None:
        for item in page:
            self.last = item
            if item.sequenced:
                self.chain.add(item.event)
                if self.digest is not None:
                    self.digest.add(item.event)
            if self.models is not None:
                self.models.add(item.event)

    def finish(self) -> None:
        if self.digest is not None:
            self.digest.finish()
        if self.models is not None:
            self.models.finish()

"""Verify archives from their files alone, with no database (`outcomes audit verify --archive`).

For each archive in a folder, in order: every file is there, with the SHA-256 and the row count
the manifest gives; every event's hash is recomputed, every stream's chain followed (from its first
event, or from the head the archive before it kept it at: kept streams, and straddling jobs), the
ledger-wide chain followed from the link before the archive's first position to its last, which
must be the manifest's; the Merkle tree grown from the manifest's frontier before its first
leaf with a leaf for each event is its frontier at the end (`tree`, when the manifest has it),
which the next archive's goes on from; the counts are the manifest's; the heads at the end of
every stream it does not take (the jobs file lists the job streams it takes) are its
checkpoints; and each manifest names the one before it by its SHA-256, continuing its
positions, its chain and its tree. The events of an archive are read batch by batch, merged
in ledger order (a file opened once the merge reaches its first position), and checked in one
pass as they go by (`chain_check.verify_in_order`): memory holds a head a stream of one
archive, never its events; the archived jobs' streams (the jobs file's) and their heads in
`stream_table`'s arrays, no Python object a job.
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ledger.archive import ArchiveBase, Manifest, TreeSpan
from ledger.archive_files import (
    JOBS_FILE,
    archive_folders,
    first_position,
    read_events,
    read_rows,
    rows_in,
    sha256_of,
)
from ledger.chain import Problem, ProblemKind, VerifyReport
from ledger.chain_check import verify_in_order
from ledger.errors import ArchiveError, ProofError
from ledger.events import RecordedEvent
from ledger.merkle import Frontier, event_leaf_hash, leaf_hash
from ledger.stream_table import StreamSet

Progress = Callable[[int], None]


@dataclass
class ArchiveCheck:
    """What verifying one archive's files found."""

    folder: Path
    manifest: Manifest
    report: VerifyReport = field(default_factory=VerifyReport)

    @property
    def ok(self) -> bool:
        return self.report.ok


def verify_archives(
    directory: Path, progress: Progress | None = None, only: int | None = None
) -> list[ArchiveCheck]:
    """Every archive in `directory` (or archive `only`), in order, each against the one
    before it."""
    checks: list[ArchiveCheck] = []
    before: tuple[Manifest, str] | None = None
    for folder, manifest, sha in archive_folders(directory):
        if only is not None and manifest.archive_id != only:
            before = (manifest, sha)
            continue
        check = ArchiveCheck(folder, manifest)
        _check_previous(manifest, before, check.report)
        if _check_files(folder, manifest, check.report):
            _check_events(folder, manifest, check.report, progress)
            _check_jobs(folder, manifest, check.report)
        checks.append(check)
        before = (manifest, sha)
    return checks


def total_events(directory: Path) -> int:
    """How many events the archives hold (for a progress bar)."""
    return sum(m.counts.events for _, m, _ in archive_folders(directory))


def _check_previous(
    manifest: Manifest, before: tuple[Manifest, str] | None, report: VerifyReport
) -> None:
    previous = manifest.previous
    if before is None:
        if previous is not None:  # not a failure: a folder may hold the newer archives only
            return
        if manifest.ledger_hash_before is not None:
            _manifest(report, "it names no previous archive, yet its chain starts mid-ledger")
        return
    earlier, sha = before
    if previous is None or previous.manifest_sha256 != sha:
        _manifest(
            report,
            f"it does not name archive {earlier.archive_id}'s manifest by its SHA-256: a "
            "manifest was altered or replaced",
        )
    if manifest.write_from != earlier.write_to:
        _manifest(
            report,
            f"its write positions start at {manifest.write_from}, not at "
            f"{earlier.write_to} where archive {earlier.archive_id}'s end",
        )
    if manifest.ledger_hash_before != earlier.ledger_hash_last:
        _manifest(report, f"its chain does not go on from archive {earlier.archive_id}'s last link")
    if earlier.checkpoints != manifest.streams_before:
        _manifest(report, f"its kept streams do not go on from archive {earlier.archive_id}'s")
    if (
        earlier.tree is not None
        and manifest.tree is not None
        and earlier.tree.after != manifest.tree.before
    ):
        _manifest(report, f"its Merkle tree does not go on from archive {earlier.archive_id}'s")


def _check_files(folder: Path, manifest: Manifest, report: VerifyReport) -> bool:
    """Each file's SHA-256 and rows; False when one cannot be read at all."""
    readable = True
    for entry in manifest.files:
        path = folder / entry.name
        if not path.is_file():
            _file(report, f"{entry.name} is missing")
            readable = False
            continue
        if sha256_of(path) != entry.sha256:
            _file(report, f"{entry.name}: its SHA-256 is not the manifest's (the file changed)")
        try:
            rows = rows_in(path)
        except ArchiveError as exc:
            _file(report, str(exc))
            readable = False
            continue
        if rows != entry.rows:
            _file(report, f"{entry.name} holds {rows} rows; the manifest says {entry.rows}")
    return readable


def _check_events(
    folder: Path, manifest: Manifest, report: VerifyReport, progress: Progress | None
) -> None:
    merged = in_ledger_order([folder / f.name for f in manifest.files if f.kind == "events"])
    archived = StreamSet()  # the job streams it takes; every other stream is kept (checkpoints)
    try:
        if any(f.name == JOBS_FILE for f in manifest.files):
            for row in read_rows(folder / JOBS_FILE, columns=["job_id"]):
                archived.add(f"job-{row['job_id']}")
    except ArchiveError as exc:
        _file(report, str(exc))
        return
    seen = _Seen()
    leaves = _Leaves(manifest.tree, report) if manifest.tree is not None else None
    if leaves is not None:
        merged = leaves.watch(merged)
    start = ArchiveBase(
        archive_id=manifest.archive_id - 1,
        position=(manifest.ledger_first or 1) - 1,
        ledger_hash=manifest.ledger_hash_before,
        write_to=manifest.write_from,
        kept_events=0,
    )
    continued = {s: (h.version, h.hash) for s, h in manifest.streams_before.items()}
    try:
        found, chain = verify_in_order(
            seen.watch(merged, progress),
            dense_from=manifest.dense_from,
            base=start,
            continued=continued,
            table=archived,
        )
    except ArchiveError as exc:
        _file(report, str(exc))
        return
    if leaves is not None:
        leaves.finish(manifest, report)
    report.events_checked += found.events_checked
    report.streams_checked += found.streams_checked
    report.problems.extend(found.problems)
    seen.job_events = chain.table_events
    counts = manifest.counts
    for what, got, want in (
        ("events", seen.events, counts.events),
        ("job events", seen.job_events, counts.job_events),
        ("kept events", seen.events - seen.job_events, counts.kept_events),
    ):
        if got != want:
            _manifest(report, f"the files hold {got} {what}; the manifest says {want}")
    if seen.last is not None and (
        seen.last.position != manifest.ledger_last
        or seen.last.ledger_hash != manifest.ledger_hash_last
    ):
        _manifest(report, "the last event is not the one the manifest ends at")
    kept = chain.heads  # every stream's but the archived jobs' (held in `chain.table_heads`)
    expected = manifest.kept_heads()
    if kept != expected:
        _manifest(report, "the kept streams' heads at the end are not the manifest's checkpoints")


def in_ledger_order(paths: list[Path]) -> Iterator[RecordedEvent]:
    """The files' events merged by ledger position (on a tie, the earlier file's first), each
    file opened only once the merge reaches its first position (its footer's statistics): an
    archive's files follow each other in ledger order but at their edges, so about one is read
    at a time, whatever their number. A file whose footer does not say is opened at once."""
    firsts = [(first_position(path), index, path) for index, path in enumerate(paths)]
    waiting = deque(sorted(firsts, key=lambda item: (_before_all(item[0]), item[1])))
    heap: list[tuple[int, int, RecordedEvent, Iterator[RecordedEvent]]] = []

    def push(index: int, source: Iterator[RecordedEvent]) -> None:
        event = next(source, None)
        if event is not None:
            heapq.heappush(heap, (event.position, index, event, source))

    while heap or waiting:
        while waiting and (not heap or _before_all(waiting[0][0]) <= heap[0][0]):
            _, index, path = waiting.popleft()
            push(index, read_events(path))
        if heap:
            _, index, event, source = heapq.heappop(heap)
            yield event
            push(index, source)


def _before_all(position: int | None) -> int:
    return -1 if position is None else position


def _check_jobs(folder: Path, manifest: Manifest, report: VerifyReport) -> None:
    if not any(f.name == JOBS_FILE for f in manifest.files):
        return
    statuses: Counter[str] = Counter()
    try:
        for row in read_rows(folder / JOBS_FILE, columns=["status", "terminal"]):
            statuses[str(row["status"])] += 1
            if not row["terminal"]:
                _manifest(report, "the jobs file holds a job that had not ended")
    except ArchiveError as exc:
        _file(report, str(exc))
        return
    if sum(statuses.values()) != manifest.counts.jobs:
        _manifest(
            report,
            f"the jobs file holds {sum(statuses.values())} jobs; the manifest "
            f"says {manifest.counts.jobs}",
        )
    if dict(statuses) != manifest.counts.jobs_by_status:
        _manifest(report, "the jobs file's statuses are not the manifest's counts")


class _Seen:
    """Counts gathered while the chain is verified (one pass over the events)."""

    def __init__(self) -> None:
        self.events = 0
        self.job_events = 0
        self.last: RecordedEvent | None = None

    def watch(
        self, events: Iterator[RecordedEvent], progress: Progress | None
    ) -> Iterator[RecordedEvent]:
        for event in events:
            self.events += 1
            self.last = event
            if progress is not None:
                progress(1)
            yield event


class _Leaves:
    """The Merkle tree grown from the manifest's frontier before the archive with a leaf for
    each event from the tree's first position (its `event_leaf_hash`), a batch at a time:
    O(log n) hashes of state."""

    BATCH = 4096

    def __init__(self, span: TreeSpan, report: VerifyReport) -> None:
        self.start = span.start_position
        self.frontier: Frontier | None = None
        self.after: Frontier | None = None
        self._pending: list[bytes] = []
        try:
            self.frontier, self.after = span.frontiers()
        except ProofError as exc:
            _manifest(report, f"its Merkle tree frontiers are not sound: {exc}")

    def watch(self, events: Iterator[RecordedEvent]) -> Iterator[RecordedEvent]:
        for event in events:
            if self.frontier is not None and event.position >= self.start:
                self._pending.append(_leaf(event.hash))
                if len(self._pending) >= self.BATCH:
                    self._flush()
            yield event

    def finish(self, manifest: Manifest, report: VerifyReport) -> None:
        if self.frontier is None or self.after is None:
            return
        self._flush()
        if self.frontier != self.after:
            report.problems.append(
                Problem(
                    ProblemKind.MERKLE_MISMATCH,
                    "",
                    0,
                    manifest.ledger_last,
                    f"Merkle tree: the tree grown from the archive's events ({self.frontier.size} "
                    f"leaves) is not the one its manifest records at its end ({self.after.size} "
                    "leaves): an event's hash in its files, or the manifest's tree, was changed",
                )
            )

    def _flush(self) -> None:
        if self.frontier is not None and self._pending:
            self.frontier = self.frontier.extend(self._pending)
        self._pending = []


def _leaf(event_hash: str) -> bytes:
    try:
        return event_leaf_hash(event_hash)
    except ProofError:  # not a hash at all: a leaf no stored tree holds
        return leaf_hash(str(event_hash).encode())


def _manifest(report: VerifyReport, message: str) -> None:
    report.problems.append(Problem(ProblemKind.ARCHIVE_MANIFEST, "", 0, None, message))


def _file(report: VerifyReport, message: str) -> None:
    report.problems.append(Problem(ProblemKind.ARCHIVE_FILE, "", 0, None, message))

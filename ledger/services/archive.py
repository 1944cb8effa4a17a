"""`outcomes archive`: the oldest ranges of the ledger leave the database, still verifiable, as
open files (docs/archive.md).

In this order, each step only once the one before it is durable:
1. plan: the longest run of the oldest ranges (partitions) that are old enough and that ends
   at a clean cut (what they hold is a prefix of the ledger order); a range before which the
   run must stop is named with its reason. The jobs ended inside the run leave; a job with
   events below the cut that has not ended inside it (in flight) is kept, like the tokens'
   and brakes' streams, and leaves with a later archive;
2. write the files under temporary names, flush, rename (`ledger.archive_files`); read them back
   and compare every row with the database, and verify them as an auditor would;
3. record the archive in the database (its manifest, its jobs);
4. finish: in one transaction, the job streams' rows leave, the archive is done.
A crash at any step leaves the rows, the files or both; the next run finishes a recorded
archive (after reading its files back again) or plans again from the start.
Reading archives (`verify_files`, `find_job`, …): `archive_reads`, whose names this offers too.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from itertools import zip_longest
from pathlib import Path

from ledger import archive_files
from ledger.archive import (
    DONE,
    RECORDED,
    ArchiveCounts,
    ArchiveFile,
    ArchiveRange,
    ArchiveRecord,
    Manifest,
    PreviousArchive,
    StreamHead,
    TreeSpan,
    archive_folder_name,
)
from ledger.archive_check import ArchiveCheck, verify_archives
from ledger.clock import now
from ledger.errors import ArchiveError, ArchiveRefusedError, ProofError, SubtreeMissingError
from ledger.events import TERMINAL_EVENT_TYPES, RecordedEvent
from ledger.merkle import Frontier
from ledger.merkle_store import frontier_at
from ledger.runtime.ledger import Ledger
from ledger.services.archive_reads import FoundJob as FoundJob
from ledger.services.archive_reads import base as base
from ledger.services.archive_reads import find_job as find_job
from ledger.services.archive_reads import records as records
from ledger.services.archive_reads import total_events as total_events
from ledger.services.archive_reads import verify_files as verify_files
from ledger.stream_table import StreamSet

Progress = Callable[[int], None]
# A test's way to kill the process at a step (files, recorded), as a crash would.
FAULT_VARIABLE = "OUTCOMES_ARCHIVE_FAULT"


@dataclass(frozen=True)
class Plan:
    ranges: list[ArchiveRange]
    ledger_last: int | None
    stopped: str | None  # why the run stops before the next range (None: nothing more to take)

    @property
    def write_from(self) -> int:
        return self.ranges[0].lower

    @property
    def write_to(self) -> int:
        return self.ranges[-1].upper


@dataclass
class ArchiveResult:
    record: ArchiveRecord
    folder: Path
    manifest: Manifest
    resumed: bool = False
    stopped: str | None = None
    checks: list[ArchiveCheck] = field(default_factory=list)


def plan(ledger: Ledger, before: datetime) -> Plan:
    """What an archive of everything recorded before `before` would take now."""
    store = ledger.store
    store.sequence()  # what committed before is placed, so a cut's cleanliness is known
    ranges = store.archive_ranges()
    taken: list[ArchiveRange] = []
    chosen = 0
    last: int | None = None
    stopped: str | None = None
    for lower, upper in ranges:
        facts = store.range_facts(lower, upper)
        where = f"write positions [{lower}, {upper})"
        if facts.newest is not None and facts.newest >= before:
            stopped = f"{where} hold events recorded at or after {before.isoformat()}"
            break
        # A job not ended below the cut (a straddler) does not stop the run: it is kept.
        taken.append(facts)
        cut = store.cut_at(taken[0].lower, upper)
        if cut.unsequenced:
            stopped = f"{cut.unsequenced} events of {where} have no ledger position yet"
            break
        if not cut.clean:
            stopped = f"the ledger order is not cut clean at {upper}: {cut.reason}"
            continue  # the next range may end at a clean cut
        chosen, last, stopped = len(taken), cut.ledger_last, None
    if not chosen:
        raise ArchiveRefusedError(
            f"nothing can be archived: {stopped or 'no range of the ledger is full yet'}"
        )
    return Plan(taken[:chosen], last, stopped)


def archive(
    ledger: Ledger, directory: Path, before: datetime, progress: Progress | None = None
) -> ArchiveResult:
    """Archive what `plan` takes into a new folder of `directory`, or finish an archive a
    crash left recorded. ArchiveRefusedError when nothing can be archived."""
    store = ledger.store
    role = store.connected_role()
    if role is not None and not role.can_rewrite_history:
        raise ArchiveRefusedError(
            f"connected as {role.name!r}: an archive removes rows of the recorded history, "
            "which only the schema's owner may; run `outcomes archive` as the owner"
        )
    records = store.archive_records()
    pending = [r for r in records if r.state == RECORDED]
    if pending:
        resumed = _resume(ledger, directory, pending[0], progress)
        if resumed is not None:
            return resumed
        records = store.archive_records()
    done = [r for r in records if r.state == DONE]
    chosen = plan(ledger, before)
    folder = directory / archive_folder_name((done[-1].archive_id if done else 0) + 1)
    folder.mkdir(parents=True, exist_ok=True)
    manifest = _write(ledger, folder, chosen, done[-1] if done else None, progress)
    raw = manifest.dumps()
    sha = archive_files.write_manifest(folder, manifest)
    checks = _read_back(ledger, directory, folder, manifest)
    _fault("files")
    record = ArchiveRecord(
        archive_id=manifest.archive_id,
        state=RECORDED,
        created_at=manifest.created_at,
        write_from=manifest.write_from,
        write_to=manifest.write_to,
        ledger_first=manifest.ledger_first,
        ledger_last=manifest.ledger_last,
        ledger_hash=manifest.ledger_hash_last,
        events=manifest.counts.events,
        jobs=manifest.counts.jobs,
        manifest_sha256=sha,
        manifest=raw,
    )
    listed = store.record_archive(record)
    if listed != manifest.counts.jobs:
        store.abandon_archive(record.archive_id)
        raise ArchiveError(
            f"the database listed {listed} jobs for archive {record.archive_id}; its files "
            f"hold {manifest.counts.jobs}: nothing was removed"
        )
    _fault("recorded")
    store.finish_archive(record)
    return ArchiveResult(record, folder, manifest, stopped=chosen.stopped, checks=checks)


def _resume(
    ledger: Ledger, directory: Path, record: ArchiveRecord, progress: Progress | None
) -> ArchiveResult | None:
    """Finish an archive recorded before a crash, once its files read back whole again;
    files that do not: the archive is abandoned (None), and planned anew."""
    folder = directory / archive_folder_name(record.archive_id)
    manifest = record.parsed()
    try:
        on_disk = archive_files.sha256_of(folder / "manifest.json")
        if on_disk != record.manifest_sha256:
            raise ArchiveError(f"{folder} holds another manifest than the recorded one")
        checks = _read_back(ledger, directory, folder, manifest)
    except (ArchiveError, OSError):
        ledger.store.abandon_archive(record.archive_id)
        return None
    if progress is not None:
        progress(manifest.counts.events)
    ledger.store.finish_archive(record)
    return ArchiveResult(record, folder, manifest, resumed=True, checks=checks)


def _write(
    ledger: Ledger,
    folder: Path,
    chosen: Plan,
    previous: ArchiveRecord | None,
    progress: Progress | None,
) -> Manifest:
    store = ledger.store
    before = previous.parsed() if previous is not None else None
    statuses: Counter[str] = Counter()
    archived = StreamSet()  # the job streams this archive takes (ended below its cut)

    def job_rows() -> Iterator[dict[str, object]]:
        for row in store.archive_jobs(chosen.write_from, chosen.write_to):
            statuses[str(row["status"])] += 1
            archived.add(f"job-{row['job_id']}")
            yield archive_files.job_row(row)

    path = folder / archive_files.JOBS_FILE
    jobs = archive_files.write_rows(path, archive_files.JOB_SCHEMA, job_rows())
    jobs_file = ArchiveFile(
        name=path.name, kind="jobs", rows=jobs, sha256=archive_files.sha256_of(path)
    )
    earlier = dict(before.checkpoints) if before else {}
    tally = _Tally(earlier, archived)
    files: list[ArchiveFile] = []
    for part in chosen.ranges:
        name = archive_files.events_file_name(part.lower, part.upper)
        rows = archive_files.write_rows(
            folder / name,
            archive_files.EVENT_SCHEMA,
            (
                archive_files.event_row(e)
                for e in tally.watch(store.archive_events(part.lower, part.upper), progress)
            ),
        )
        sha = archive_files.sha256_of(folder / name)
        files.append(
            ArchiveFile(
                name=name,
                kind="events",
                rows=rows,
                sha256=sha,
                write_from=part.lower,
                write_to=part.upper,
            )
        )
    files.append(jobs_file)
    if tally.open_jobs:  # the read model said ended; the events say otherwise
        raise ArchiveRefusedError(
            f"job {min(tally.open_jobs).removeprefix('job-')} has no terminal event in write "
            f"positions [{chosen.write_from}, {chosen.write_to}): nothing was archived"
        )
    # A straddler archived now leaves the kept rows: the events an earlier archive kept of it
    # (its versions up to its checkpoint there) leave the database with it.
    left = sum(head.version for stream, head in earlier.items() if stream in archived)
    state = store.sequencer_state()
    return Manifest(
        archive_id=(previous.archive_id if previous else 0) + 1,
        created_at=now(),
        previous=PreviousArchive(
            archive_id=previous.archive_id, manifest_sha256=previous.manifest_sha256
        )
        if previous
        else None,
        write_from=chosen.write_from,
        write_to=chosen.write_to,
        ledger_first=tally.first,
        ledger_last=tally.last.position if tally.last else None,
        ledger_hash_before=before.ledger_hash_last if before else None,
        ledger_hash_last=tally.last.ledger_hash if tally.last else None,
        dense_from=state.dense_from if state is not None else None,
        counts=ArchiveCounts(
            events=tally.events,
            job_events=tally.job_events,
            kept_events=tally.events - tally.job_events,
            kept_total=(before.counts.kept_total if before else 0)
            + tally.events
            - tally.job_events
            - left,
            jobs=jobs,
            jobs_by_status=dict(sorted(statuses.items())),
        ),
        streams_before=dict(before.checkpoints) if before else {},
        checkpoints=tally.checkpoints(),
        files=files,
        tree=_tree_span(ledger, before, tally.last.position if tally.last else None),
    )


def _tree_span(ledger: Ledger, before: Manifest | None, last: int | None) -> TreeSpan | None:
    """The Merkle tree around the archive: the previous archive's frontier after it (the empty
    tree for the first archive), and the stored tree's frontier at the archive's last leaf
    (read before its rows leave). None when there is no leaf in it, or the previous archive
    carries no frontier to go on from."""
    if last is None:
        return None
    if before is None:
        start = Frontier.empty()
    elif before.tree is not None:
        try:
            start = before.tree.frontiers()[1]
        except ProofError:
            return None
    else:
        return None
    with ledger.store.in_order() as reads:
        state = reads.tree_state()
        leaf = reads.tree_leaf_index(last)
        if leaf is None:
            return None
        try:
            after = frontier_at(reads.tree_hashes(), leaf + 1)
        except SubtreeMissingError:
            return None
    return TreeSpan(
        start_position=state.start_position, before=start.to_json(), after=after.to_json()
    )


class _Tally:
    """What the manifest says of the events, gathered as they are written. `archived`: the
    job streams the archive takes, of which it keeps only whether each was met yet (a byte of
    `archived.marks`); every other stream (not a job's, or a job not ended below the cut) is
    kept, its head at the cut a checkpoint."""

    def __init__(self, earlier: dict[str, StreamHead], archived: StreamSet) -> None:
        # Each kept stream's (version, hash) so far: a tuple, not a model, one a stream.
        self.heads: dict[str, tuple[int, str]] = {}
        for stream, head in earlier.items():
            number = archived.index(stream)
            if number >= 0:
                archived.marks[number] = 1  # its first events are an earlier archive's
            else:
                self.heads[stream] = (head.version, head.hash)
        self.archived = archived
        self.events = 0
        self.job_events = 0
        self.first: int | None = None
        self.last: RecordedEvent | None = None
        self.open_jobs: set[str] = set()  # archived job streams seen without their terminal event

    def watch(
        self, found: Iterator[RecordedEvent], progress: Progress | None
    ) -> Iterator[RecordedEvent]:
        for event in found:
            self.events += 1
            stream = event.stream_id
            number = self.archived.index(stream)
            if number >= 0:
                self.job_events += 1
                # Met first, and its first events are not an earlier archive's.
                if not self.archived.marks[number]:
                    self.archived.marks[number] = 1
                    self.open_jobs.add(stream)
                if event.type in TERMINAL_EVENT_TYPES:
                    self.open_jobs.discard(stream)
            else:
                self.heads[stream] = (event.stream_version, event.hash)
            if self.first is None or event.position < self.first:
                self.first = event.position
            if self.last is None or event.position > self.last.position:
                self.last = event
            if progress is not None:
                progress(1)
            yield event

    def checkpoints(self) -> dict[str, StreamHead]:
        """The heads at the cut of the streams the archive keeps (all but those it takes)."""
        return {
            stream: StreamHead(version=version, hash=hash_)
            for stream, (version, hash_) in self.heads.items()
        }


def _read_back(
    ledger: Ledger, directory: Path, folder: Path, manifest: Manifest
) -> list[ArchiveCheck]:
    """Every row of the files against the database, then the files verified as an auditor
    would (hashes, chains, counts, SHA-256s): ArchiveError naming the first difference."""
    store = ledger.store
    for entry in manifest.files:
        if entry.kind != "events" or entry.write_from is None or entry.write_to is None:
            continue
        stored = store.archive_events(entry.write_from, entry.write_to)
        written = archive_files.read_events(folder / entry.name)
        for in_file, in_db in zip_longest(written, stored):
            if in_file != in_db:
                where = in_db.position if in_db is not None else "the end"
                raise ArchiveError(
                    f"{entry.name} differs from the database at ledger position {where}"
                )
    checks = verify_archives(directory, only=manifest.archive_id)
    broken = [p for c in checks for p in c.report.problems]
    if broken:
        raise ArchiveError(f"{folder.name} does not verify: {broken[0].message}")
    return checks


def _fault(step: str) -> None:
    if os.environ.get(FAULT_VARIABLE) == step:
        os.kill(os.getpid(), signal.SIGKILL)

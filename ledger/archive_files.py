"""An archive's files: Parquet, which any auditor reads with DuckDB, pandas or pyarrow, and
nothing of ours (docs/archive.md).

- `events-<from>-<to>.parquet`, one per archived range of write positions: every event written
  there, in ledger order, every column: both positions, the stream, version, id, type, `data`
  as JSON text (the text the hash covers, keys sorted), code, actor, time (UTC, microseconds),
  both hashes.
- `jobs.parquet`: the archived jobs' read-model rows, `view` as JSON text.
- `manifest.json` (`ledger.archive.Manifest`).

Files are written under a temporary name, flushed to disk, then renamed, and the folder is
flushed too: a file under its final name is whole. Reading goes batch by batch, so memory stays
bounded whatever an archive holds.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from ledger.archive import MANIFEST_NAME, Manifest, manifest_sha256
from ledger.clock import utc
from ledger.errors import ArchiveError
from ledger.events import RecordedEvent

BATCH = 5000  # rows per write and per read
JOBS_FILE = "jobs.parquet"
EVENT_SCHEMA = pa.schema(
    [
        ("ledger_position", pa.int64()),
        ("write_position", pa.int64()),
        ("stream_id", pa.string()),
        ("stream_version", pa.int32()),
        ("event_id", pa.string()),
        ("type", pa.string()),
        ("data", pa.string()),
        ("code", pa.string()),
        ("actor", pa.string()),
        ("recorded_at", pa.timestamp("us", tz="UTC")),
        ("prev_hash", pa.string()),
        ("hash", pa.string()),
        ("ledger_hash", pa.string()),
    ]
)
JOB_SCHEMA = pa.schema(
    [
        ("job_id", pa.string()),
        ("account", pa.string()),
        ("tool", pa.string()),
        ("status", pa.string()),
        ("terminal", pa.bool_()),
        ("accepted", pa.bool_()),
        ("spends", pa.bool_()),
        ("attempts", pa.int32()),
        ("code", pa.string()),
        ("idempotency_key", pa.string()),
        ("ledger_position", pa.int64()),
        ("created_at", pa.timestamp("us", tz="UTC")),
        ("updated_at", pa.timestamp("us", tz="UTC")),
        ("view", pa.string()),
    ]
)


def events_file_name(write_from: int, write_to: int) -> str:
    return f"events-{write_from}-{write_to}.parquet"


def event_row(event: RecordedEvent) -> dict[str, Any]:
    return {
        "ledger_position": event.position,
        "write_position": event.stored_position,
        "stream_id": event.stream_id,
        "stream_version": event.stream_version,
        "event_id": str(event.event_id),
        "type": event.type,
        "data": orjson.dumps(event.data, option=orjson.OPT_SORT_KEYS).decode(),
        "code": event.code,
        "actor": event.actor,
        "recorded_at": event.recorded_at,
        "prev_hash": event.prev_hash,
        "hash": event.hash,
        "ledger_hash": event.ledger_hash,
    }


def row_event(row: Mapping[str, Any]) -> RecordedEvent:
    written = row["write_position"]
    return RecordedEvent(
        position=row["ledger_position"],
        write_position=None if written == row["ledger_position"] else written,
        stream_id=row["stream_id"],
        stream_version=row["stream_version"],
        event_id=row["event_id"],
        type=row["type"],
        data=orjson.loads(row["data"]),
        code=row["code"],
        actor=row["actor"],
        recorded_at=utc(row["recorded_at"]),
        prev_hash=row["prev_hash"],
        hash=row["hash"],
        ledger_hash=row["ledger_hash"],
    )


def job_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A stored jobs row (`Reads.read_model_rows`) as the jobs file keeps it."""
    found = {name: row.get(name) for name in JOB_SCHEMA.names}
    view = row["view"]
    found["view"] = view if isinstance(view, str) else orjson.dumps(view).decode()
    return found


def write_rows(path: Path, schema: pa.Schema, rows: Iterable[Mapping[str, Any]]) -> int:
    """Write the rows durably (temporary name, flushed, renamed, folder flushed); how many."""
    temporary = path.with_name(f".{path.name}.tmp")
    written = 0
    with open(temporary, "wb") as sink:
        writer = pq.ParquetWriter(sink, schema, compression="zstd")
        try:
            for batch in _batches(rows):
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                written += len(batch)
            if written == 0:
                writer.write_table(schema.empty_table())
        finally:
            writer.close()
        sink.flush()
        os.fsync(sink.fileno())
    os.replace(temporary, path)
    sync_folder(path.parent)
    return written


def write_manifest(folder: Path, manifest: Manifest) -> str:
    """Write the manifest durably; its SHA-256 (what the next archive and the database name)."""
    raw = manifest.dumps()
    path = folder / MANIFEST_NAME
    temporary = folder / f".{MANIFEST_NAME}.tmp"
    with open(temporary, "wb") as sink:
        sink.write(raw)
        sink.flush()
        os.fsync(sink.fileno())
    os.replace(temporary, path)
    sync_folder(folder)
    return manifest_sha256(raw)


def sync_folder(folder: Path) -> None:
    """A rename is durable once its folder is flushed."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        while chunk := source.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def read_rows(path: Path, columns: list[str] | None = None) -> Iterator[dict[str, Any]]:
    """Every row, batch by batch. ArchiveError naming the file when it is not Parquet."""
    try:
        source = pq.ParquetFile(path)
        for batch in source.iter_batches(batch_size=BATCH, columns=columns):
            yield from python_rows(batch)
    except (OSError, pa.ArrowException) as exc:
        raise ArchiveError(f"{path.name} cannot be read: {_first_line(exc)}") from None


def python_rows(batch: pa.RecordBatch) -> list[dict[str, Any]]:
    """A batch's rows as Python values, its times aware (UTC). They are converted here as
    naive UTC times, then made aware: pyarrow converts an aware time through pandas, when it
    is installed, which is 40 MB more of every process that reads an archive."""
    aware = [f.name for f in batch.schema if pa.types.is_timestamp(f.type) and f.type.tz]
    if not aware:
        found: list[dict[str, Any]] = batch.to_pylist()
        return found
    arrays = [
        column.cast(pa.timestamp(field.type.unit)) if field.name in aware else column
        for field, column in zip(batch.schema, batch.columns, strict=True)
    ]
    rows: list[dict[str, Any]] = pa.RecordBatch.from_arrays(
        arrays, names=batch.schema.names
    ).to_pylist()
    for row in rows:
        for name in aware:
            if row[name] is not None:
                row[name] = row[name].replace(tzinfo=UTC)
    return rows


def rows_in(path: Path) -> int:
    """The rows a Parquet file says it holds (its footer)."""
    try:
        return int(pq.ParquetFile(path).metadata.num_rows)
    except (OSError, pa.ArrowException) as exc:
        raise ArchiveError(f"{path.name} cannot be read: {_first_line(exc)}") from None


def first_position(path: Path) -> int | None:
    """The lowest ledger position an events file holds, from its footer's statistics (every
    row group's minimum); None when the footer does not say (or the file is not Parquet:
    reading it says why)."""
    try:
        metadata = pq.ParquetFile(path).metadata
        column = metadata.schema.to_arrow_schema().get_field_index("ledger_position")
        if column < 0:
            return None
        lowest: int | None = None
        for group in range(metadata.num_row_groups):
            stats = metadata.row_group(group).column(column).statistics
            if stats is None or not stats.has_min_max:
                return None
            lowest = int(stats.min) if lowest is None else min(lowest, int(stats.min))
        return lowest
    except (OSError, pa.ArrowException, ValueError, TypeError):
        return None


def read_events(path: Path) -> Iterator[RecordedEvent]:
    for row in read_rows(path):
        try:
            yield row_event(row)
        except (KeyError, ValueError, orjson.JSONDecodeError) as exc:
            raise ArchiveError(f"{path.name} holds a row that is no event: {exc}") from None


def find_job(folder: Path, job_id: str) -> dict[str, Any] | None:
    """The archived job's row in this archive's jobs file, if it is there."""
    path = folder / JOBS_FILE
    if not path.exists():
        return None
    try:
        table = pq.read_table(path, filters=[("job_id", "=", job_id)])
    except (OSError, pa.ArrowException) as exc:
        raise ArchiveError(f"{path.name} cannot be read: {_first_line(exc)}") from None
    rows = table.to_pylist()
    return rows[0] if rows else None


def stream_events(folder: Path, manifest: Manifest, stream_id: str) -> list[RecordedEvent]:
    """One stream's events in this archive, in version order (a filter each file applies)."""
    found: list[RecordedEvent] = []
    for entry in manifest.files:
        if entry.kind != "events":
            continue
        path = folder / entry.name
        try:
            table = pq.read_table(path, filters=[("stream_id", "=", stream_id)])
        except (OSError, pa.ArrowException) as exc:
            raise ArchiveError(f"{path.name} cannot be read: {_first_line(exc)}") from None
        found.extend(row_event(row) for row in table.to_pylist())
    return sorted(found, key=lambda event: event.stream_version)


def archive_folders(directory: Path) -> list[tuple[Path, Manifest, str]]:
    """Each archive in `directory` (a folder with a manifest), by number: the folder, its
    manifest and the manifest's SHA-256. A manifest that does not parse is an error."""
    if not directory.is_dir():
        raise ArchiveError(f"{directory} is not a folder of archives")
    found = []
    for folder in sorted(p for p in directory.iterdir() if p.is_dir()):
        path = folder / MANIFEST_NAME
        if not path.exists():
            continue
        raw = path.read_bytes()
        manifest = Manifest.loads(raw, str(path))
        found.append((folder, manifest, manifest_sha256(raw)))
    if not found:
        raise ArchiveError(f"{directory} holds no archive (no folder with a {MANIFEST_NAME})")
    return sorted(found, key=lambda entry: entry[1].archive_id)


def _batches(rows: Iterable[Mapping[str, Any]]) -> Iterator[list[Mapping[str, Any]]]:
    batch: list[Mapping[str, Any]] = []
    for row in rows:
        batch.append(row)
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def as_time(value: datetime | None) -> datetime | None:
    return utc(value) if value is not None else None

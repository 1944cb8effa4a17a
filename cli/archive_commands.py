"""`outcomes archive`, `outcomes audit verify --archive DIR` and `outcomes jobs show ID
--archive DIR`: the old ledger out of the database into open files, and read back from them
(docs/archive.md)."""

from __future__ import annotations

import re
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import click
import orjson

from cli.context import with_ledger
from cli.errors import EXIT_PROBLEM, EXIT_USAGE, fail, reports_errors
from cli.output import emit_json, json_option
from ledger.archive_check import ArchiveCheck
from ledger.clock import now, utc
from ledger.runtime.ledger import Ledger
from ledger.services import archive as archive_service
from ledger.services import archive_reads
from ledger.services import audit as audit_service

_AGE = re.compile(r"^(\d+)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def cutoff(older_than: str | None, before: str | None) -> datetime:
    """The moment before which everything recorded may go (exactly one option gives it)."""
    if (older_than is None) == (before is None):
        fail("give one of --older-than AGE or --before DATE", EXIT_USAGE)
    if older_than is not None:
        found = _AGE.match(older_than.strip())
        if found is None:
            fail(
                f"--older-than {older_than!r}: a whole number and a unit: 90d, 12h, 30m", EXIT_USAGE
            )
        try:
            return now() - timedelta(seconds=int(found[1]) * _UNIT_S[found[2]])
        except OverflowError:  # more days than a date can go back
            fail(f"--older-than {older_than!r}: longer ago than any date", EXIT_USAGE)
    try:
        return utc(datetime.fromisoformat(str(before)))
    except ValueError:
        fail(f"--before {before!r}: an ISO 8601 date or moment (UTC if no offset)", EXIT_USAGE)


@click.command("archive")
@click.option(
    "--older-than",
    metavar="AGE",
    help="Archive what was recorded longer ago than AGE: a whole number and s, m, h or d "
    "(e.g. 90d).",
)
@click.option("--before", metavar="DATE", help="Archive what was recorded before DATE (ISO 8601).")
@click.option(
    "--to",
    "directory",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="Where the archives go: each in a numbered folder of DIR (Parquet files and a "
    "manifest). Keep DIR out of the ledger writers' reach.",
)
@json_option
@reports_errors
@with_ledger
def archive(
    ledger: Ledger, older_than: str | None, before: str | None, directory: Path, as_json: bool
) -> None:
    """Move the oldest ranges of the ledger out of the database into open files, still
    verifiable: each range's events as Parquet, the archived jobs' rows, and a manifest
    chained to the previous archive's. Only ranges whose jobs have all ended, and that end
    where the ledger order is cut clean, go; the files are written, flushed and read back
    before any row leaves, and a run that was stopped half way is finished by the next. Run
    it as the schema's owner. Archived jobs then answer 410 Gone; `outcomes audit verify`
    goes on from the archive, and `outcomes audit verify --archive DIR` checks the files with
    no database."""
    moment = cutoff(older_than, before)
    total = max(1, audit_service.size(ledger))  # at most: the whole ledger
    with click.progressbar(length=total, label="archiving", file=sys.stderr) as bar:
        done = archive_service.archive(ledger, directory, moment, progress=bar.update)
    manifest = done.manifest
    summary = {
        "archive_id": manifest.archive_id,
        "folder": str(done.folder),
        "resumed": done.resumed,
        "write_positions": [manifest.write_from, manifest.write_to],
        "ledger_positions": [manifest.ledger_first, manifest.ledger_last],
        "ledger_hash": manifest.ledger_hash_last,
        "counts": manifest.counts.model_dump(mode="json"),
        "stopped": done.stopped,
    }
    if as_json:
        emit_json(summary)
        return
    counts = manifest.counts
    what = "finished" if done.resumed else "archived"
    click.echo(
        f"{what} archive {manifest.archive_id} → {done.folder}: {counts.events} events "
        f"(ledger positions {manifest.ledger_first}..{manifest.ledger_last}), {counts.jobs} jobs"
    )
    if done.stopped:
        click.echo(f"stopped before the next range: {done.stopped}")


def verify_archive(directory: Path, as_json: bool) -> None:
    """`audit verify --archive DIR`: the files alone, no database."""
    total = archive_reads.total_events(directory)
    with click.progressbar(length=total, label="verifying", file=sys.stderr) as bar:
        checks = archive_reads.verify_files(directory, progress=bar.update)
    if as_json:
        emit_json({"ok": all(c.ok for c in checks), "archives": [_check_json(c) for c in checks]})
    else:
        for check in checks:
            _echo_check(check)
    broken = [c for c in checks if not c.ok]
    if broken:
        first = broken[0].report.first_problem
        assert first is not None
        fail(f"archive {broken[0].manifest.archive_id} broken: {first.message}", EXIT_PROBLEM)


def _check_json(check: ArchiveCheck) -> dict[str, Any]:
    return {
        "archive_id": check.manifest.archive_id,
        "folder": str(check.folder),
        "ok": check.ok,
        "events_checked": check.report.events_checked,
        "problems": [
            {
                "kind": p.kind.value,
                "position": p.position,
                "stream_id": p.stream_id,
                "message": p.message,
            }
            for p in check.report.problems
        ],
    }


def _echo_check(check: ArchiveCheck) -> None:
    name = f"archive {check.manifest.archive_id} ({check.folder.name})"
    if check.ok:
        click.echo(f"ok: {name}: {check.report.events_checked} events verify")
        return
    for problem in check.report.problems[:20]:
        click.echo(f"{name}: {problem.message}")


def show_archived(directory: Path, job_id: str, as_json: bool) -> None:
    """`jobs show ID --archive DIR`: the job as its archive keeps it."""
    found = archive_reads.find_job(directory, job_id)
    row = dict(found.row)
    view = orjson.loads(str(row.pop("view")))
    body = {
        "archive_id": found.archive_id,
        "folder": str(found.folder),
        "job": view,
        "events": [
            {
                "position": e.position,
                "type": e.type,
                "stream_version": e.stream_version,
                "recorded_at": e.recorded_at.isoformat(),
                "hash": e.hash,
            }
            for e in found.events
        ],
    }
    if as_json:
        emit_json(body)
        return
    click.echo(f"{'archive':>16}: {found.archive_id} ({found.folder})")
    for key in ("job_id", "account", "tool", "status", "code", "created_at", "updated_at"):
        if view.get(key) is not None:
            click.echo(f"{key:>16}: {view[key]}")
    for event in found.events:
        click.echo(f"{event.position:>16}: {event.type} ({event.recorded_at.isoformat()})")

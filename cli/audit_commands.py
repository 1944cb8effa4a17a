"""`outcomes audit …`: prove the ledger is intact."""

from __future__ import annotations

import csv
import sys
from datetime import datetime
from pathlib import Path

import click
import orjson

from cli.context import with_ledger
from cli.errors import EXIT_PROBLEM, fail, reports_errors
from cli.output import emit_json, json_option
from cli.params import POSITION
from ledger.clock import utc
from ledger.digest import Digest
from ledger.public import public_event
from ledger.queries import EventFilter
from ledger.services import audit as audit_service
from ledger.services.ledger import Ledger

output_option = click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Write to this file instead of stdout.",
)


@click.group()
def audit() -> None:
    """Auditors' commands: query events, summarize outcomes, export, take digests, verify."""


def when(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    """An ISO 8601 moment; naive values are UTC."""
    if value is None:
        return None
    try:
        return utc(datetime.fromisoformat(value))
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not an ISO 8601 date or time (e.g. 2026-11-30T08:00)"
        ) from None


CSV_COLUMNS = ["position", "stream_id", "stream_version", "type", "code", "actor", "recorded_at"]


@audit.command()
@click.option("--account", help="Only this account's job events.")
@click.option("--tool", help="Only this tool's job events.")
@click.option("--type", "event_type", help="Only this event type (e.g. work.failed).")
@click.option("--code", help="Only events with this code (e.g. ACCESS_DENIED).")
@click.option("--since", callback=when, help="Recorded at or after this moment (UTC).")
@click.option("--until", callback=when, help="Recorded before this moment (UTC).")
@click.option("--after", type=POSITION, default=0, help="Ledger position cursor.")
@click.option("--limit", type=click.IntRange(1, 100_000), default=100, show_default=True)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "jsonl", "csv"]),
    default="table",
    show_default=True,
)
@output_option
@reports_errors
@with_ledger
def events(
    ledger: Ledger,
    account: str | None,
    tool: str | None,
    event_type: str | None,
    code: str | None,
    since: datetime | None,
    until: datetime | None,
    after: int,
    limit: int,
    fmt: str,
    output: Path | None,
) -> None:
    """List recorded events, oldest first, filtered."""
    where = EventFilter(account, tool, event_type, code, since, until, after, limit)
    items = [public_event(e) for e in audit_service.events(ledger, where)]
    with click.open_file(str(output) if output else "-", "w") as out:
        if fmt == "jsonl":
            for item in items:
                out.write(orjson.dumps(item).decode() + "\n")
        elif fmt == "csv":
            writer = csv.DictWriter(out, CSV_COLUMNS, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(items)
        else:
            out.write(f"{'POSITION':>9}  {'TYPE':<20} {'CODE':<22} {'RECORDED AT':<27} STREAM\n")
            for i in items:
                out.write(
                    f"{i['position']:>9}  {i['type']:<20} {i['code'] or '-':<22} "
                    f"{i['recorded_at']:<27} {i['stream_id']}\n"
                )


@audit.command()
@click.option("--account", help="Only this account.")
@click.option("--tool", help="Only this tool.")
@click.option("--since", callback=when, help="Jobs created at or after this moment (UTC).")
@click.option("--until", callback=when, help="Jobs created before this moment (UTC).")
@json_option
@reports_errors
@with_ledger
def summary(
    ledger: Ledger,
    account: str | None,
    tool: str | None,
    since: datetime | None,
    until: datetime | None,
    as_json: bool,
) -> None:
    """Count jobs by status, code, tool and account over a window."""
    found = audit_service.summary(ledger, account, tool, since, until)
    if as_json:
        emit_json(found.to_json())
        return
    click.echo(f"jobs: {found.jobs}")
    for title, counts in (
        ("status", found.by_status),
        ("code", found.by_code),
        ("tool", found.by_tool),
        ("account", found.by_account),
    ):
        click.echo(f"by {title}:")
        for key, count in counts.items():
            click.echo(f"  {key:<28} {count:>8}")


@audit.command()
@output_option
@reports_errors
@with_ledger
def export(ledger: Ledger, output: Path | None) -> None:
    """Export every event as JSONL, exactly as stored (job arguments included: guard the file
    like the database), with hashes, so the ledger can be verified elsewhere."""
    total = audit_service.size(ledger)
    written = 0
    with (
        click.open_file(str(output) if output else "-", "w") as out,
        click.progressbar(length=total, label="exporting", file=sys.stderr) as bar,
    ):
        for event in audit_service.every_event(ledger, progress=bar.update):
            out.write(orjson.dumps(public_event(event, raw=True)).decode() + "\n")
            written += 1
    click.echo(f"exported {written} events", err=True)


@audit.command()
@output_option
@reports_errors
@with_ledger
def digest(ledger: Ledger, output: Path | None) -> None:
    """Print a JSON digest: the head (version, hash) of every stream.

    Keep it somewhere the ledger's writers cannot reach; `audit verify --digest FILE` later
    proves the ledger still extends it (a history rewritten end to end is caught this way).
    """
    taken = audit_service.take_digest(ledger)
    if output is None:
        click.echo(taken.dumps().decode())
    else:
        output.write_bytes(taken.dumps())
        click.echo(
            f"digest of {taken.events} events in {len(taken.heads)} streams → {output}", err=True
        )


@audit.command()
@click.option(
    "--digest",
    "digest_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A digest saved earlier by `outcomes audit digest`.",
)
@json_option
@reports_errors
@with_ledger
def verify(ledger: Ledger, digest_file: Path | None, as_json: bool) -> None:
    """Recompute every event's hash and chain link; exit 2 naming the first broken position."""
    earlier = Digest.loads(digest_file.read_bytes()) if digest_file else None
    total = audit_service.size(ledger)
    # Progress goes to stderr so that stdout stays clean for --json.
    with click.progressbar(length=total, label="verifying", file=sys.stderr) as bar:
        report = audit_service.verify(ledger, earlier, progress=bar.update)
    first = report.first_problem
    if as_json:
        emit_json(
            {
                "ok": report.ok,
                "events_checked": report.events_checked,
                "streams_checked": report.streams_checked,
                "problems": [vars(p) | {"kind": p.kind.value} for p in report.problems],
                "first_broken_position": first.position if first else None,
            }
        )
    elif report.ok:
        click.echo(f"ok: {report.events_checked} events in {report.streams_checked} streams verify")
    if first is not None:
        where = f"position {first.position}" if first.position is not None else first.stream_id
        fail(f"ledger broken at {where}: {first.message}", EXIT_PROBLEM)

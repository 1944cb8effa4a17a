"""`outcomes audit …`: prove the ledger is intact."""

from __future__ import annotations

import csv
import sys
from datetime import datetime
from pathlib import Path

import click
import orjson

from cli import verify_output
from cli.archive_commands import verify_archive
from cli.context import ledger_of, with_ledger
from cli.digest_publishing import parse_every, publish_every, publish_once
from cli.errors import EXIT_PROBLEM, EXIT_USAGE, fail, reports_errors
from cli.output import emit_json, json_option, text_out
from cli.params import POSITION
from cli.proof_commands import PROOF_COMMANDS
from ledger import digest_files
from ledger.clock import utc
from ledger.digest import Digest
from ledger.errors import HeadAheadError, StorageError, TreeHeadError
from ledger.public import public_event
from ledger.queries import EventFilter
from ledger.runtime.ledger import Ledger
from ledger.services import audit as audit_service
from ledger.services import proofs, verifications, verify_passes, verify_proofs
from ledger.verification_record import FULL, SAMPLE, SINCE

output_option = click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Write to this file instead of stdout (mode 0600: it holds job arguments).",
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
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print JSON Lines: one JSON object per event (the same as --format jsonl).",
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
    as_json: bool,
    output: Path | None,
) -> None:
    """List recorded events, oldest first, filtered. --json (or --format jsonl) prints JSON
    Lines, one event per line; for the next page pass the last line's position as --after."""
    if as_json:
        fmt = "jsonl"
    where = EventFilter(account, tool, event_type, code, since, until, after, limit)
    items = [public_event(e) for e in audit_service.events(ledger, where)]
    with text_out(output) as out:
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
        text_out(output) as out,
        click.progressbar(length=total, label="exporting", file=sys.stderr) as bar,
    ):
        for event in audit_service.every_event(ledger, progress=bar.update):
            out.write(orjson.dumps(public_event(event, raw=True)).decode() + "\n")
            written += 1
    click.echo(f"exported {written} events", err=True)


@audit.command()
@output_option
@click.option(
    "--to",
    "to",
    type=click.Path(path_type=Path),
    metavar="DIR",
    help="Publish into this directory: a new read-only (0444) file per digest, never "
    "overwritten, named so that names sort by time.",
)
@click.option(
    "--every",
    metavar="SECONDS",
    help="With --to: publish now and every SECONDS until SIGTERM or SIGINT (exit 0).",
)
@click.option(
    "--streams",
    is_flag=True,
    help="The per-stream digest (every stream's head: O(streams) bytes) that `audit verify "
    "--digest` and `--against` read; --to publishes this kind.",
)
@json_option
@reports_errors
@with_ledger
def digest(
    ledger: Ledger,
    output: Path | None,
    to: Path | None,
    every: str | None,
    streams: bool,
    as_json: bool,
) -> None:
    """Print the Merkle tree head as a digest (at most 4 KB, signed when OUTCOMES_SIGNING_KEY
    is set: `audit verify --since FILE` checks the ledger still extends it); with --streams,
    the per-stream digest (the head of every stream); or publish per-stream digests (--to).

    A digest proves something only where the ledger's writers cannot reach it. DIR (--to)
    must be a place the application's database role and the machines that write the ledger
    cannot change: another OS user's directory, a write-once (object-lock) bucket mount, an
    auditor's host. `audit verify --digest FILE` or `--against DIR` later proves the ledger
    still extends them (a history rewritten end to end is caught this way).
    """
    period = parse_every(every, to, output)
    if to is None and not streams:
        doc = orjson.dumps(proofs.head(ledger).to_json(), option=orjson.OPT_SORT_KEYS)
        if output is None:
            click.echo(doc.decode())
        else:
            output.write_bytes(doc + b"\n")
            click.echo(f"tree head ({len(doc)} bytes) → {output}", err=True)
        return
    if to is not None:
        if period is None:
            publish_once(ledger, to, as_json)
        else:
            publish_every(ledger, to, period, as_json)
        return
    # Streamed from the store to the file (or stdout): the heads are never all in memory.
    if output is None:
        audit_service.write_digest(ledger, sys.stdout.buffer)
        click.echo()
        return
    with output.open("wb") as out:
        taken = audit_service.write_digest(ledger, out)
    click.echo(f"digest of {taken.events} events in {taken.streams} streams → {output}", err=True)


@audit.command()
@click.option(
    "--digest",
    "digest_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A digest saved earlier by `outcomes audit digest`.",
)
@click.option(
    "--since",
    "since_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    metavar="HEAD",
    help="Verify only what came after a tree head kept apart (`audit digest -o HEAD` or "
    "`audit head --json`): its frontier extended with every event after its position, "
    "against the stored tree and the current head (which must extend it), and the hash "
    "chains and read models of the streams those events touch. Time grows with the events "
    "since the head, not with the ledger.",
)
@click.option(
    "--sample",
    type=click.IntRange(min=1),
    metavar="N",
    help="Prove N events drawn at random from the tree instead: each re-hashed from its row "
    "and its inclusion proof checked against the current head (seconds at any size).",
)
@click.option(
    "--seed",
    type=int,
    help="With --sample: the draw's seed, to repeat a sample (default: a new draw each run).",
)
@click.option(
    "--against",
    "against_dir",
    type=click.Path(path_type=Path),
    metavar="DIR",
    help="Every digest in DIR: tree heads (`audit digest -o DIR/FILE`) are each checked by a "
    "consistency proof to the current head (O(log n)); per-stream digests (`audit digest "
    "--to DIR`) each by one read of the events they cover (full verification only). Every "
    "file but hidden ones must be an intact digest or tree head (one malformed or altered is "
    "an error naming it). DIR must be out of the ledger writers' reach.",
)
@click.option(
    "--archive",
    "archive_dir",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="Verify the archives in DIR (`outcomes archive --to DIR`) from their files alone, "
    "with no database: SHA-256s, every hash, every stream's chain, the ledger-wide chain "
    "across consecutive archives, counts and the manifests' chain.",
)
@click.option(
    "--by",
    "verified_by",
    metavar="NAME",
    help="Who verifies, as the recorded verification names them (default: the OS user and "
    "host, user@host).",
)
@json_option
@reports_errors
def verify(
    digest_file: Path | None,
    since_file: Path | None,
    sample: int | None,
    seed: int | None,
    against_dir: Path | None,
    archive_dir: Path | None,
    verified_by: str | None,
    as_json: bool,
) -> None:
    """Prove the ledger intact: recompute every event's hash and chain link, fold every read
    model (jobs, brakes, tokens, webhooks) from the events and compare it with the stored one
    (nothing is written), and check that the ledger still extends the given digests. Two
    passes over the events (ledger order, stream order), in memory that does not grow with
    the ledger. After an archive, the chains go on from where it ends. The result is
    recorded: the console, `outcomes status` and /metrics show the last one. Exit 2 with a
    one-line reason: the first broken position, the digest no longer extended, or the
    read-model row (table, key, field) that differs.

    --since HEAD and --sample N check less than the whole ledger, fast (docs/integrity.md
    says what each proves and does not); a bad HEAD file, or a head larger than the current
    tree, is refused with exit 2."""
    partial = since_file is not None or sample is not None
    if archive_dir is not None:
        if digest_file is not None or against_dir is not None or partial:
            fail(
                "--archive verifies files alone: not with --digest, --against, --since or --sample",
                EXIT_USAGE,
            )
        verify_archive(archive_dir, as_json)
        return
    if since_file is not None and sample is not None:
        fail("--since and --sample are separate checks: run one, then the other", EXIT_USAGE)
    if seed is not None and sample is None:
        fail("--seed goes with --sample", EXIT_USAGE)
    if partial and digest_file is not None:
        fail("--digest (a per-stream digest) needs the full verification", EXIT_USAGE)
    ledger = ledger_of(click.get_current_context())
    earlier = Digest.loads(digest_file.read_bytes()) if digest_file else None
    published = audit_service.load_published(against_dir) if against_dir else None
    digests = published.digests if published else []
    if partial and digests:
        fail(
            f"{against_dir} holds per-stream digests: they need the full verification (tree "
            "heads alone go with --since and --sample)",
            EXIT_USAGE,
        )
    if since_file is not None:
        found = _verify_since(ledger, since_file)
    elif sample is not None:
        with click.progressbar(length=sample, label="proving", file=sys.stderr) as bar:
            found = verify_proofs.verify_sample(ledger, sample, seed, progress=bar.update)
    else:
        total = audit_service.size(ledger) * verify_passes.passes(len(digests))
        # Progress goes to stderr so that stdout stays clean for --json.
        with click.progressbar(length=total, label="verifying", file=sys.stderr) as bar:
            found = audit_service.verify_all(ledger, earlier, digests, progress=bar.update)
    if published is not None and published.heads:
        found.digests.extend(verify_proofs.check_heads(ledger, published.heads))
    with_digest = earlier is not None or published is not None or since_file is not None
    try:
        scope = SINCE if since_file is not None else SAMPLE if sample is not None else FULL
        verifications.record(ledger, found, verified_by, with_digest, scope)
    except StorageError as exc:  # a role that may only read: the verification still stands
        click.echo(f"outcomes: the result was not recorded: {exc}", err=True)
    if as_json:
        emit_json(verify_output.to_json(found))
    else:
        verify_output.echo_lines(found)
    reason = verify_output.failure(found)
    if reason is not None:
        fail(reason, EXIT_PROBLEM)


def _verify_since(ledger: Ledger, since_file: Path) -> verify_passes.Verification:
    """`verify --since`: a head that cannot be checked from is refused (exit 2) naming it."""
    try:
        head = digest_files.read_head(since_file)
        total = verify_proofs.since_events(ledger, head)
        with click.progressbar(length=total, label="verifying", file=sys.stderr) as bar:
            return verify_proofs.verify_since(ledger, head, progress=bar.update)
    except HeadAheadError as exc:
        fail(f"--since {since_file}: {exc}", EXIT_PROBLEM)
    except TreeHeadError as exc:
        fail(
            f"--since {exc}" if str(since_file) in str(exc) else f"--since {since_file}: {exc}",
            EXIT_USAGE,
        )


for _command in PROOF_COMMANDS:
    audit.add_command(_command)

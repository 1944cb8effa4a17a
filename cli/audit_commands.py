"""`outcomes audit …`: prove the ledger is intact."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from cli.errors import EXIT_PROBLEM, fail, reports_errors
from cli.output import emit_json, json_option
from ledger.digest import Digest
from ledger.persistence.audit import take_digest, verify_ledger
from ledger.persistence.open import open_store


@click.group()
def audit() -> None:
    """Auditors' commands: verify the hash chains, take and check digests."""


@audit.command()
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Write the digest to this file instead of stdout.",
)
@reports_errors
def digest(output: Path | None) -> None:
    """Print a JSON digest: the head (version, hash) of every stream.

    Keep it somewhere the ledger's writers cannot reach; `audit verify --digest FILE` later
    proves the ledger still extends it (a history rewritten end to end is caught this way).
    """
    store = open_store()
    taken = take_digest(store)
    store.engine.dispose()
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
def verify(digest_file: Path | None, as_json: bool) -> None:
    """Recompute every event's hash and chain link; exit 2 naming the first broken position."""
    earlier = Digest.loads(digest_file.read_bytes()) if digest_file else None
    store = open_store()
    total = store.last_position()
    # Progress goes to stderr so that stdout stays clean for --json.
    with click.progressbar(length=total, label="verifying", file=sys.stderr) as bar:
        report = verify_ledger(store, earlier, progress=bar.update)
    store.engine.dispose()
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

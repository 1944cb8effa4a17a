"""`outcomes audit digest --every S --to DIR`: publish a digest now and every S seconds, each
as a new read-only file, until SIGTERM or SIGINT (then exit 0: the digest being written is
finished first; a second signal stops at once)."""

from __future__ import annotations

import math
import time
from pathlib import Path

import click

from cli.errors import EXIT_USAGE, fail
from cli.output import emit_json
from cli.stopping import stop_on_signals
from ledger.digest_writer import DigestSummary
from ledger.errors import LedgerError
from ledger.runtime.ledger import Ledger
from ledger.services import audit as audit_service


def parse_every(every: str | None, to: Path | None, output: Path | None) -> float | None:
    """The period in seconds (None: publish once, or print); a bad combination or value is a
    one-line usage error."""
    if to is not None and output is not None:
        fail("--to and --output exclude each other", EXIT_USAGE)
    if to is not None and not to.is_dir():
        fail(f"--to {to}: not a directory", EXIT_USAGE)
    if every is None:
        return None
    if to is None:
        fail("--every needs --to DIR: where the digests are published", EXIT_USAGE)
    try:
        seconds = float(every)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        fail(f"--every {every!r}: a positive number of seconds, e.g. 3600", EXIT_USAGE)
    return seconds


def publish_once(ledger: Ledger, directory: Path, as_json: bool) -> None:
    path, taken = audit_service.publish_digest(ledger, directory)
    show(path, taken, as_json)


def publish_every(ledger: Ledger, directory: Path, every_s: float, as_json: bool) -> None:
    """The first digest must be published (a directory we cannot write is a setup error);
    a later failure is reported and the next tick tries again."""
    with stop_on_signals() as stop:
        publish_once(ledger, directory, as_json)
        due = time.monotonic() + every_s
        while not stop.wait(max(0.0, due - time.monotonic())):
            # Ticks keep their rhythm; a slow digest does not make the next ones pile up.
            due = max(due + every_s, time.monotonic())
            try:
                publish_once(ledger, directory, as_json)
            except (LedgerError, OSError) as exc:
                click.echo(f"outcomes: digest not published: {exc}; retrying", err=True)


def show(path: Path, taken: DigestSummary, as_json: bool) -> None:
    if as_json:
        emit_json({"file": str(path), **taken.to_json()})
    else:
        click.echo(f"digest of {taken.events} events in {taken.streams} streams → {path}")

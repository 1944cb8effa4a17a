"""What `outcomes audit verify` prints: lines for people, one JSON document for programs, and
the one-line reason of a non-zero exit."""

from __future__ import annotations

from typing import Any

import click

from ledger.chain import Problem, VerifyReport
from ledger.services import verifications
from ledger.services.verify_passes import Verification

SHOWN = 20  # problem lines printed for people; --json carries them all (up to the report's cap)


def to_json(found: Verification) -> dict[str, Any]:
    first = first_broken(found)
    return {
        "ok": found.ok,
        "scope": found.scope,  # None: the whole ledger (else --since's or --sample's)
        "events_checked": found.chain.events_checked,
        "streams_checked": found.chain.streams_checked,
        "problems": _problems(found.chain),
        "problems_total": found.chain.problems_total,  # beyond the problems kept: counted
        "first_broken_position": first.position if first else None,
        "read_models": found.read_models.to_json(),
        "digests": [
            {"file": str(d.source), "ok": d.report.ok, "problems": _problems(d.report)}
            for d in found.digests
        ],
    }


def echo_lines(found: Verification) -> None:
    chain, models = found.chain, found.read_models
    if chain.ok and found.scope is not None:
        click.echo(f"ok: {found.scope}")
    elif chain.ok:
        click.echo(f"ok: {chain.events_checked} events in {chain.streams_checked} streams verify")
    rows = ", ".join(f"{table} {count}" for table, count in models.rows_checked.items())
    if models.ok and (found.scope is None or models.rows_checked):
        click.echo(f"ok: the read models are what the events make ({rows} rows)")
    else:
        for mismatch in models.problems[:SHOWN]:
            click.echo(f"read model {mismatch.message}")
        if models.problems_total > SHOWN:
            click.echo(f"… and {models.problems_total - SHOWN} more read-model problems")
    extended = [d for d in found.digests if d.report.ok]
    if extended:
        span = f"{extended[0].source.name} … {extended[-1].source.name}"
        click.echo(f"ok: the ledger extends {len(extended)} published digests ({span})")
    for checked in found.digests:
        for problem in checked.report.problems[:SHOWN]:
            click.echo(f"digest {checked.source}: {problem.message}")


def failure(found: Verification) -> str | None:
    """The one-line reason to exit non-zero, or None when everything verified (the same line
    the verification's record keeps)."""
    return verifications.failure(found)


def first_broken(found: Verification) -> Problem | None:
    every = [*found.chain.problems, *(p for d in found.digests for p in d.report.problems)]
    return verifications.first_of(every)


def _problems(report: VerifyReport) -> list[dict[str, Any]]:
    return [vars(p) | {"kind": p.kind.value} for p in report.problems]

"""`outcomes reconcile`: turn silence into recorded outcomes."""

from __future__ import annotations

import click

from cli.context import ledger_of
from cli.errors import reports_errors
from cli.output import emit_json, json_option
from cli.params import MAX_DISPATCHES_OPTION, FiniteFloatRange
from ledger.services import admin
from ledger.services.reconcile import (
    INTERVAL_S,
    MAX_DISPATCHES,
    Pass,
    ReconcileRunner,
    policy_from,
)
from ledger.settings import load_settings

MAX_INTERVAL_S = 3600.0  # an hour: rarer passes would leave silence unrecorded for too long


@click.command()
@click.option("--once", is_flag=True, help="Run one pass and exit (for cron or a test).")
@click.option(
    "--interval",
    type=FiniteFloatRange(0.1, MAX_INTERVAL_S),
    default=INTERVAL_S,
    show_default=True,
    help="Seconds between passes when looping.",
)
@click.option(
    "--max-dispatches",
    type=MAX_DISPATCHES_OPTION,
    default=MAX_DISPATCHES,
    show_default=True,
    help="Dispatches (the first included) before a never-started job is closed as failed.",
)
@json_option
@reports_errors
def reconcile(once: bool, interval: float, max_dispatches: int, as_json: bool) -> None:
    """Find accepted jobs that never started and started jobs whose worker went silent, and
    record what happened: re-dispatch (nothing ran), the next attempt, or OUTCOME_MISSING.

    Safe to run several at once: each finding is recorded once. A failed pass (the database
    away, say) is reported and the next one tries again. The dispatch deadline is
    OUTCOMES_DISPATCH_TIMEOUT_S (default 30 s); leases are OUTCOMES_LEASE_S (default 30 s).
    """
    from workers.dispatch import dispatcher_from_settings  # the broker, via the worker side

    settings = load_settings()
    ledger = ledger_of(click.get_current_context(), settings.database_url, pool_size=2)
    if warning := admin.privilege_warning(ledger):
        click.echo(f"outcomes: WARNING: {warning}", err=True)
    runner = ReconcileRunner(
        ledger, dispatcher_from_settings(), policy_from(settings, max_dispatches), interval
    )

    def report(result: Pass) -> None:
        if as_json:
            emit_json(result.to_json())
        elif result.recorded or once:
            click.echo(
                f"reconcile: {result.examined} overdue, {len(result.recorded)} recorded"
                + "".join(f"\n  {line}" for line in result.recorded)
            )

    if once:
        report(runner.run_once())
        return
    try:
        runner.run(report, lambda exc: click.echo(_failed(exc), err=True))
    except KeyboardInterrupt:
        return


def _failed(exc: Exception) -> str:
    return f"outcomes: reconcile pass failed: {type(exc).__name__}: {exc}; retrying"

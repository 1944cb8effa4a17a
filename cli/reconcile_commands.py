"""`outcomes reconcile`: turn silence into recorded outcomes."""

from __future__ import annotations

import threading

import click

from cli.errors import reports_errors
from cli.output import emit_json, json_option
from ledger.errors import LedgerError
from ledger.persistence.open import open_store
from ledger.persistence.reconcile import reconcile_once
from ledger.reconcile_rules import ReconcilePolicy
from ledger.settings import load_settings


@click.command()
@click.option("--once", is_flag=True, help="Run one pass and exit (for cron or a test).")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=5.0,
    show_default=True,
    help="Seconds between passes when looping.",
)
@click.option(
    "--max-dispatches",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Dispatches (the first included) before a never-started job is closed as failed.",
)
@json_option
@reports_errors
def reconcile(once: bool, interval: float, max_dispatches: int, as_json: bool) -> None:
    """Find accepted jobs that never started and started jobs whose worker went silent, and
    record what happened: re-dispatch (nothing ran), the next attempt, or OUTCOME_MISSING.

    Safe to run several at once: each finding is recorded once. The dispatch deadline is
    OUTCOMES_DISPATCH_TIMEOUT_S (default 30 s); leases are OUTCOMES_LEASE_S (default 30 s).
    """
    from workers.dispatch import dispatcher_from_settings  # the broker, via the worker side

    settings = load_settings()
    store = open_store(settings.database_url, pool_size=2)
    policy = ReconcilePolicy(settings.dispatch_timeout_s, max_dispatches)
    dispatcher = dispatcher_from_settings()
    stop = threading.Event()
    try:
        while True:
            try:
                result = reconcile_once(store, dispatcher, policy)
            except LedgerError as exc:
                if once:
                    raise
                # A database blip must not end the loop: silence would go unrecorded.
                click.echo(f"outcomes: reconcile pass failed: {exc}; retrying", err=True)
                if stop.wait(interval):
                    return
                continue
            if as_json:
                emit_json(
                    {
                        "examined": result.examined,
                        "recorded": result.recorded,
                        "lost_races": result.lost_races,
                        "dispatch_failures": result.dispatch_failures,
                    }
                )
            elif result.recorded or once:
                click.echo(
                    f"reconcile: {result.examined} overdue, {len(result.recorded)} recorded"
                    + "".join(f"\n  {line}" for line in result.recorded)
                )
            if once or stop.wait(interval):
                return
    except KeyboardInterrupt:
        return
    finally:
        store.engine.dispose()

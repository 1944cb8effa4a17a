"""`outcomes reconcile`: turn silence into recorded outcomes."""

from __future__ import annotations

import click

from cli.context import ledger_of
from cli.errors import reports_errors
from cli.home_records import BeatingRunner, Heartbeat
from cli.output import emit_json, json_option
from cli.params import FiniteFloatRange
from cli.stopping import stop_on_signals
from cli.webhook_sender import WebhookSender
from ledger.heap import freeze_startup_heap
from ledger.runtime.sequencer import SequencerLoop
from ledger.services import admin
from ledger.services.reconcile import (
    INTERVAL_S,
    Pass,
    ReconcileRunner,
    policy_from,
)
from ledger.services.webhook_relay import WebhookRelay
from ledger.services.webhook_relay import policy_from as webhook_policy
from ledger.settings import load_settings
from observability import tracing

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
@json_option
@reports_errors
def reconcile(once: bool, interval: float, as_json: bool) -> None:
    """Turn silence into recorded outcomes, and see that every accepted job reaches the
    broker.

    Each pass: a job not started by its start deadline (the caller's start_within_s, capped by
    the tool's; 600 s by default) is closed as OUTCOME_MISSING (never_started); a job whose
    worker went silent past its lease gets its next attempt or OUTCOME_MISSING (worker_lost);
    a waiting job whose confirmed message is shown gone (the queue lost its epoch marker, or a
    worker could not take it) is re-dispatched, with that evidence recorded. A late job is
    never re-dispatched on a timer: its message waits in the queue.

    Between passes, every second, the relay publishes the accepted jobs whose dispatch no
    broker confirmed for OUTCOMES_DISPATCH_TIMEOUT_S (default 5 s): their deciding process
    died, or the broker was away. Safe to run several at once: each finding is recorded once,
    and a duplicate message is harmless. A failed pass (the database away, say) is reported
    and the next one tries again. Leases are OUTCOMES_LEASE_S (default 30 s).

    On Postgres it also runs the sequencer: writers commit without a ledger-wide lock, and one
    reconciler process (elected by an advisory lock; another takes over within a second when it
    stops) gives each committed event its ledger position and link, in commit order, within
    milliseconds (docs/architecture.md, "Ledger order").

    Beside the passes, the webhook relay delivers every terminal outcome to the webhooks of
    its account, signed, retried for OUTCOMES_WEBHOOK_RETRY_FOR_S (docs/webhooks.md); it
    needs the secrets key (OUTCOMES_SECRETS_KEY) to sign.

    SIGTERM or Ctrl-C stops it after the pass under way has recorded and reported what it
    found; a second one stops it at once.

    Looping on a SQLite ledger, it keeps a heartbeat in ./.outcomes/reconciler.json after each
    pass: `outcomes status` in this folder says from it whether a reconciler runs.
    """
    from workers.dispatch import dispatcher_from_settings  # the broker, via the worker side

    settings = load_settings()
    tracing.install_from_env("outcome-ledger-reconciler")  # the relay's dispatch spans
    ledger = ledger_of(click.get_current_context(), settings.database_url, pool_size=2)
    if warning := admin.privilege_warning(ledger):
        click.echo(f"outcomes: WARNING: {warning}", err=True)
    dispatcher, policy = dispatcher_from_settings(), policy_from(settings)
    # Looping on embedded defaults: a heartbeat, so `outcomes status` here tells it runs.
    beats = settings.embedded and not once
    heartbeat = Heartbeat("outcomes reconcile", interval) if beats else None
    runner = (
        ReconcileRunner(ledger, dispatcher, policy, interval)
        if heartbeat is None
        else BeatingRunner(ledger, dispatcher, policy, heartbeat, interval)
    )

    def report(result: Pass) -> None:
        if as_json:
            emit_json(result.to_json())
        elif result.recorded or once:
            click.echo(
                f"reconcile: {result.examined} overdue, {len(result.recorded)} recorded, "
                f"{result.relayed} relayed" + "".join(f"\n  {line}" for line in result.recorded)
            )

    relay = WebhookRelay(ledger, WebhookSender(), webhook_policy(settings))
    if once:
        report(runner.run_once())
        relay.relay_once()
        relay.stop()
        return
    if heartbeat is not None:
        heartbeat.start()
    freeze_startup_heap()  # looping from here on: start-up's objects live as long as it does
    # Postgres: ledger order, led by one reconciler, which also makes the partitions ahead.
    sequencer = SequencerLoop(ledger, partitions_ahead=settings.partitions_ahead)
    sequencer.start()
    relay.start()
    try:
        # The first signal lets the pass under way finish and report; a second stops now.
        with stop_on_signals(runner.stopped):
            runner.run(report, lambda exc: click.echo(_failed(exc), err=True))
    except KeyboardInterrupt:
        return
    finally:
        relay.stop()
        sequencer.stop()
        if heartbeat is not None:
            heartbeat.stop()


def _failed(exc: Exception) -> str:
    return f"outcomes: reconcile pass failed: {type(exc).__name__}: {exc}; retrying"

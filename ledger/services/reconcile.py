"""The reconciler: check the queue's epoch, read the open jobs to judge, record each finding
once and send what it re-dispatches, relay what no dispatch confirmed; and the one loop that
runs it (`outcomes reconcile`, the reconciler inside `outcomes serve`, the beat task).

The store reads only open jobs that are overdue (past their start deadline, a lapsed lease, or
evidence that a confirmed message is gone), so a pass costs what those jobs cost, not what the
ledger holds. Between passes the loop relays every second (`RELAY_EVERY_S`), so a job whose
deciding process died unpublished goes out within about a second of the broker's return.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ledger import event_log
from ledger.clock import now
from ledger.dispatch import Dispatcher, QueueMarker
from ledger.errors import LedgerError
from ledger.events import NewEvent
from ledger.job_fold import status_after
from ledger.job_view import JobView
from ledger.persistence.appends import AppendStatus, JobAppend, LeaseChange
from ledger.reconcile_rules import Finding, ReconcilePolicy, findings
from ledger.runtime import queue_epoch
from ledger.runtime.ledger import Ledger
from ledger.runtime.outbox import Outbox, outbox_for
from ledger.services import turns
from ledger.settings import Settings
from ledger.telemetry import telemetry

log = logging.getLogger(__name__)
ACTOR = event_log.FINDER  # the kept counts of findings count its events
INTERVAL_S = 5.0  # between passes, wherever the loop runs
RELAY_EVERY_S = 1.0  # between relays, within the loop's interval
PRUNE_LIMIT = 20_000  # outbox records of finished jobs forgotten per pass
WEBHOOK_PRUNE_LIMIT = 5_000  # settled webhook deliveries forgotten per pass (with attempts)


@dataclass
class Pass:
    """What one reconcile pass did."""

    examined: int = 0
    recorded: list[str] = field(default_factory=list)  # "type job_id"
    lost_races: int = 0  # findings another reconciler (or a worker) recorded first
    dispatch_failures: int = 0  # messages the broker did not confirm (the outbox tries again)
    relayed: int = 0  # unconfirmed jobs this pass published
    queue_lost: str | None = None  # the epoch whose marker this pass found gone
    webhooks_pruned: int = 0  # settled webhook deliveries past OUTCOMES_WEBHOOK_KEEP_DAYS
    turns_halted: list[str] = field(default_factory=list)  # brake ids (docs/turns.md)

    def to_json(self) -> dict[str, object]:
        return {
            "examined": self.examined,
            "recorded": self.recorded,
            "lost_races": self.lost_races,
            "dispatch_failures": self.dispatch_failures,
            "relayed": self.relayed,
            "queue_lost": self.queue_lost,
            "webhooks_pruned": self.webhooks_pruned,
        }


def policy_from(settings: Settings) -> ReconcilePolicy:
    return ReconcilePolicy(
        relay_after_s=settings.dispatch_timeout_s,
        webhook_keep_s=settings.webhook_keep_days * 86400.0,
    )


def reconcile_once(
    ledger: Ledger,
    dispatcher: Dispatcher | Outbox | None,
    policy: ReconcilePolicy,
    at: datetime | None = None,
) -> Pass:
    outbox = outbox_for(ledger, dispatcher)
    result = Pass()
    epoch = None
    if outbox is not None and isinstance(outbox.dispatcher, QueueMarker):
        checked = queue_epoch.check(ledger, outbox.dispatcher)
        epoch, result.queue_lost = checked.epoch, checked.lost
        if checked.lost is not None:
            outbox.forget_epoch()
    moment = at or now()
    with ledger.store.reading() as reads:
        candidates = reads.overdue_jobs(moment, epoch)
    result.examined = len(candidates)
    for finding in findings(candidates, moment, policy, epoch):
        recorded = _record(ledger, finding)
        if recorded is None:
            result.lost_races += 1
            continue
        result.recorded.append(f"{finding.payload.type} {finding.job_id}")
        _observe(finding.view, finding, moment)
        if finding.dispatch and outbox is not None:
            _send(outbox, recorded, result)
    # Turns that asked to halt on failure and whose spending call failed: their brake holds
    # their calls already queued too, at the claim.
    result.turns_halted = [b.brake_id for b in turns.halt_failed_turns(ledger)]
    if outbox is not None:
        relay(outbox, policy, result)
        with ledger.store.transaction() as tx:  # once a pass: the records of finished jobs
            tx.prune_dispatches(PRUNE_LIMIT)
    # The kept counts' deltas folded (Postgres; the sequencer's leader does it every second:
    # this covers a deployment that runs passes from beat alone).
    ledger.store.compact_counts()
    with ledger.store.transaction() as tx:  # and the webhook deliveries past their keeping
        result.webhooks_pruned = tx.prune_deliveries(
            moment - timedelta(seconds=policy.webhook_keep_s), WEBHOOK_PRUNE_LIMIT
        )
    return result


def relay(outbox: Outbox, policy: ReconcilePolicy, result: Pass) -> None:
    """Publish what no dispatch confirmed."""
    sent = outbox.relay_once(policy.relay_after_s)
    result.relayed += len(sent.confirmed)
    result.dispatch_failures += len(sent.failed)


def _record(ledger: Ledger, finding: Finding) -> JobView | None:
    """The job's view after the finding, or None when another writer moved it first."""
    event = NewEvent(payload=finding.payload, actor=ACTOR)
    attempt = getattr(finding.payload, "attempt", 0)
    # The silent attempt is over either way: its lease must not outlive it.
    append = JobAppend(finding.job_id, [event], finding.view, LeaseChange("drop", attempt))
    done = ledger.store.append_jobs([append])[0]
    # Anything else (conflict, terminal) means the job moved since we looked: someone else
    # settled it.
    return done.job if done.status is AppendStatus.OK else None


def _observe(view: JobView, finding: Finding, moment: datetime) -> None:
    status = status_after(view, finding.payload)
    event_log.finding(view, finding.payload, status)
    if status is not None and status.terminal:
        seconds = (moment - view.created_at).total_seconds()
        telemetry().outcome_recorded(view.tool, status.value, seconds)


def _send(outbox: Outbox, view: JobView, result: Pass) -> None:
    sent = outbox.send_now(view)
    if sent.failed:  # not confirmed: the relay publishes it once the broker takes it
        result.dispatch_failures += 1


OnPass = Callable[[Pass], None]
OnError = Callable[[Exception], None]


class ReconcileRunner:
    """Passes every `interval_s` until stopped, relaying every `RELAY_EVERY_S` in between. A
    failed pass never ends the loop (a database blip must not leave silence unrecorded): it
    is reported and the next pass tries again."""

    def __init__(
        self,
        ledger: Ledger,
        dispatcher: Dispatcher | Outbox | None,
        policy: ReconcilePolicy,
        interval_s: float = INTERVAL_S,
    ) -> None:
        self.ledger = ledger
        self.outbox = outbox_for(ledger, dispatcher)
        self.policy = policy
        self.interval_s = interval_s
        self.stopped = threading.Event()

    def run_once(self) -> Pass:
        return reconcile_once(self.ledger, self.outbox, self.policy)

    def run(self, on_pass: OnPass | None = None, on_error: OnError | None = None) -> None:
        """Until `stop()`: a pass, then relays until the next one is due."""
        while not self.stopped.is_set():
            due = time.monotonic() + self.interval_s
            self._guarded(self.run_once, on_pass, on_error)
            while not self.stopped.is_set():
                left = due - time.monotonic()
                if left <= 0:
                    break
                if self.stopped.wait(min(left, RELAY_EVERY_S)) or self.outbox is None:
                    continue
                if due - time.monotonic() > RELAY_EVERY_S / 2:
                    self._guarded(self._relay, None, on_error)

    def _relay(self) -> Pass:
        result = Pass()
        assert self.outbox is not None
        relay(self.outbox, self.policy, result)
        return result

    def _guarded(
        self, step: Callable[[], Pass], on_pass: OnPass | None, on_error: OnError | None
    ) -> None:
        try:
            result = step()
        except Exception as exc:
            if not isinstance(exc, LedgerError):  # a bug, not a blip: keep its traceback
                log.exception("reconcile pass crashed")
            (on_error or _log_error)(exc)
        else:
            if on_pass is not None:
                on_pass(result)

    def start(self) -> threading.Thread:
        """`run()` on a daemon thread (the reconciler beside the API in `outcomes serve`)."""
        thread = threading.Thread(target=self.run, name="reconciler", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self.stopped.set()


def _log_error(exc: Exception) -> None:
    log.warning("reconcile pass failed: %s: %s; retrying", type(exc).__name__, exc)

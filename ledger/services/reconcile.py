"""The reconciler: read overdue open jobs, record each finding once, dispatch; and the one loop
that runs it (`outcomes reconcile`, the reconciler inside `outcomes serve`, the beat task).

The store reads only open jobs that are overdue, so a pass costs what the open jobs cost, not
what the ledger holds.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from ledger import event_log
from ledger.clock import now
from ledger.dispatch import Dispatcher
from ledger.errors import AlreadyTerminalError, ConcurrencyError, DispatchError, LedgerError
from ledger.events import NewEvent, job_stream
from ledger.job_view import JobView
from ledger.reconcile_rules import Finding, ReconcilePolicy, dispatch_cutoff, findings
from ledger.services.ledger import Ledger
from ledger.settings import Settings
from ledger.telemetry import telemetry

log = logging.getLogger(__name__)
ACTOR = "reconciler"
INTERVAL_S = 5.0  # between passes, wherever the loop runs
MAX_DISPATCHES = 3  # the first dispatch included


@dataclass
class Pass:
    """What one reconcile pass did."""

    examined: int = 0
    recorded: list[str] = field(default_factory=list)  # "type job_id"
    lost_races: int = 0  # findings another reconciler (or a worker) recorded first
    dispatch_failures: int = 0

    def to_json(self) -> dict[str, object]:
        return {
            "examined": self.examined,
            "recorded": self.recorded,
            "lost_races": self.lost_races,
            "dispatch_failures": self.dispatch_failures,
        }


def policy_from(settings: Settings, max_dispatches: int = MAX_DISPATCHES) -> ReconcilePolicy:
    return ReconcilePolicy(settings.dispatch_timeout_s, max_dispatches)


def reconcile_once(
    ledger: Ledger,
    dispatcher: Dispatcher | None,
    policy: ReconcilePolicy,
    at: datetime | None = None,
) -> Pass:
    moment = at or now()
    with ledger.store.reading() as reads:
        candidates = reads.overdue_jobs(moment, dispatch_cutoff(moment, policy))
    result = Pass(examined=len(candidates))
    seen = {c.view.job_id: c.view for c in candidates}
    for finding in findings(candidates, moment, policy):
        if _record(ledger, finding):
            result.recorded.append(f"{finding.payload.type} {finding.job_id}")
            _observe(seen[finding.job_id], finding, moment)
            if finding.dispatch and dispatcher is not None:
                _dispatch(dispatcher, finding.job_id, result)
        else:
            result.lost_races += 1
    return result


def _record(ledger: Ledger, finding: Finding) -> bool:
    event = NewEvent(payload=finding.payload, actor=ACTOR)
    attempt = getattr(finding.payload, "attempt", 0)
    try:
        with ledger.store.transaction() as tx:
            tx.append(job_stream(finding.job_id), [event], finding.after_version)
            # The silent attempt is over either way: its lease must not outlive it.
            tx.drop_lease(finding.job_id, attempt)
    except (ConcurrencyError, AlreadyTerminalError):
        return False  # the job moved since we looked: someone else settled it
    return True


def _observe(view: JobView, finding: Finding, moment: datetime) -> None:
    event_log.finding(view, finding.payload)
    status = event_log.STATUS_AFTER.get(finding.payload.type)
    if status is not None and status.terminal:
        seconds = (moment - view.created_at).total_seconds()
        telemetry().outcome_recorded(view.tool, status.value, seconds)


def _dispatch(dispatcher: Dispatcher, job_id: str, result: Pass) -> None:
    try:
        dispatcher.dispatch(job_id)
    except DispatchError as exc:
        result.dispatch_failures += 1
        log.warning("re-dispatch of job %s failed (%s); the next pass will try again", job_id, exc)


OnPass = Callable[[Pass], None]
OnError = Callable[[Exception], None]


class ReconcileRunner:
    """Passes every `interval_s` until stopped. A failed pass never ends the loop (a database
    blip must not leave silence unrecorded): it is reported and the next pass tries again."""

    def __init__(
        self,
        ledger: Ledger,
        dispatcher: Dispatcher | None,
        policy: ReconcilePolicy,
        interval_s: float = INTERVAL_S,
    ) -> None:
        self.ledger = ledger
        self.dispatcher = dispatcher
        self.policy = policy
        self.interval_s = interval_s
        self.stopped = threading.Event()

    def run_once(self) -> Pass:
        return reconcile_once(self.ledger, self.dispatcher, self.policy)

    def run(self, on_pass: OnPass | None = None, on_error: OnError | None = None) -> None:
        """Until `stop()`: a pass, then a wait."""
        while not self.stopped.is_set():
            try:
                result = self.run_once()
            except Exception as exc:
                if not isinstance(exc, LedgerError):  # a bug, not a blip: keep its traceback
                    log.exception("reconcile pass crashed")
                (on_error or _log_error)(exc)
            else:
                if on_pass is not None:
                    on_pass(result)
            self.stopped.wait(self.interval_s)

    def start(self) -> threading.Thread:
        """`run()` on a daemon thread (the reconciler beside the API in `outcomes serve`)."""
        thread = threading.Thread(target=self.run, name="reconciler", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self.stopped.set()


def _log_error(exc: Exception) -> None:
    log.warning("reconcile pass failed: %s: %s; retrying", type(exc).__name__, exc)

"""The ledger's own counts as Prometheus metrics, read at scrape time (`ledger.services.counts`).

Counters are honest: decisions and terminal outcomes are append-only facts, so their counts
never fall, and they equal `outcomes audit summary` by status and code whichever process is
scraped. Every API process reports the same ledger-wide values (aggregate with max, not sum).

Every label is bounded (`observability.labels`): a refused job keeps whatever tool name its
caller sent, and is counted under `tool="_other"` unless that tool is loaded here.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from ledger.clock import now
from ledger.codes import Status
from ledger.errors import LedgerError
from ledger.runtime.ledger import Ledger
from ledger.services import counts, verifications
from observability import labels

log = logging.getLogger(__name__)
OPEN = (
    Status.AWAITING_APPROVAL.value,
    Status.QUEUED.value,
    Status.RUNNING.value,
    Status.RETRYING.value,
)


class LedgerCollector:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("outcomes_ledger_up", "1 if the ledger answered this scrape.")
        try:
            found = counts.read(self.ledger)
        except LedgerError as exc:  # a scrape must still say that the ledger is away
            log.warning("metrics: the ledger did not answer: %s", type(exc).__name__)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from _jobs(found)
        yield from _findings(found)
        yield from _brakes(found)
        yield from _outbox(found)
        yield from _approvals(found)
        position = GaugeMetricFamily(
            "outcomes_ledger_position", "The ledger's last position (events recorded so far)."
        )
        position.add_metric([], found.position)
        yield position
        yield from _sequencer(found)
        yield from _last_verification(self.ledger)


def _last_verification(ledger: Ledger) -> Iterator[Metric]:
    """The last recorded `outcomes audit verify` (one index read; the API never verifies).
    Nothing at all until one is recorded: alert on its absence, its age and its outcome."""
    try:
        found = verifications.last(ledger)
        covering = (
            found if found is None or found.covers_range else verifications.last(ledger, False)
        )
    except LedgerError as exc:  # the counts answered: report them, without this one
        log.warning("metrics: the last verification could not be read: %s", type(exc).__name__)
        return
    if found is None:
        return
    passed = GaugeMetricFamily(
        "outcomes_last_verification_ok",
        "1 if the last recorded verification (of any scope: a sample's problem is one) found "
        "the ledger intact, 0 if it found problems.",
    )
    passed.add_metric([], 1 if found.ok else 0)
    yield passed
    if covering is None:  # only samples so far: no range was ever checked whole
        return
    # A `--sample` checks no range: the position and age are the last full or --since run's.
    position = GaugeMetricFamily(
        "outcomes_last_verified_position",
        "The last ledger position the last recorded whole-range `outcomes audit verify` "
        "(full or --since, not --sample) checked.",
    )
    position.add_metric([], covering.last_position or 0)
    at = GaugeMetricFamily(
        "outcomes_last_verified_timestamp_seconds",
        "When the last recorded whole-range verification finished (Unix time; its age: "
        "time() - this).",
    )
    at.add_metric([], covering.finished_at.timestamp())
    yield position
    yield at


def _sequencer(found: counts.LedgerCounts) -> Iterator[Metric]:
    """Postgres: how far behind the commits ledger order is (none on a store that sequences
    at write)."""
    state = found.sequencer
    if state is None:
        return
    lag = GaugeMetricFamily(
        "outcomes_sequencer_lag_seconds",
        "How long the oldest committed event still without a ledger position has waited "
        "since it was recorded (0: none waits).",
    )
    lag.add_metric([], state.lag_s)
    yield lag
    waiting = GaugeMetricFamily(
        "outcomes_sequencer_waiting_events", "Committed events still without a ledger position."
    )
    waiting.add_metric([], state.waiting)
    yield waiting
    ticks = CounterMetricFamily("outcomes_sequencer_ticks", "Sequencer ticks that gave positions.")
    ticks.add_metric([], state.ticks)
    yield ticks
    if state.partitions_ahead is not None:
        ahead = GaugeMetricFamily(
            "outcomes_partitions_ahead",
            "Partitions made above the newest write position (0: the next partition's first "
            "write fails; the reconciler keeps 2 or more).",
        )
        ahead.add_metric([], state.partitions_ahead)
        yield ahead


def _jobs(found: counts.LedgerCounts) -> Iterator[Metric]:
    decisions = CounterMetricFamily(
        "outcomes_decisions",
        "Decisions recorded: accepted, or refused with the code naming the precondition.",
        labels=["status", "code", "tool"],
    )
    outcomes = CounterMetricFamily(
        "outcomes_outcomes",
        "Terminal outcomes of accepted jobs, by status, code and tool (refused: a brake held "
        "the job when a worker took it).",
        labels=["status", "code", "tool"],
    )
    open_jobs = GaugeMetricFamily(
        "outcomes_jobs_open", "Accepted jobs not yet terminal, by status.", labels=["status"]
    )
    # Groups that share their bounded labels (every tool not loaded here, say) add up.
    decided: Counter[tuple[str, str, str]] = Counter()
    ended: Counter[tuple[str, str, str]] = Counter()
    waiting = dict.fromkeys(OPEN, 0)
    for group in found.jobs:
        code = labels.code(group.code)
        tool = labels.tool(group.tool)
        if not group.accepted:
            decided["refused", code, tool] += group.jobs
            continue
        decided["accepted", "", tool] += group.jobs
        if group.status in waiting:
            waiting[group.status] += group.jobs
        else:
            ended[labels.one_of(group.status, labels.STATUSES), code, tool] += group.jobs
    for key, value in sorted(decided.items()):
        decisions.add_metric(list(key), value)
    for key, value in sorted(ended.items()):
        outcomes.add_metric(list(key), value)
    for status, value in waiting.items():
        open_jobs.add_metric([status], value)
    yield decisions
    yield outcomes
    yield open_jobs


def _findings(found: counts.LedgerCounts) -> Iterator[Metric]:
    findings = CounterMetricFamily(
        "outcomes_reconciler_findings",
        "What the reconciler recorded: redispatched, next_attempt or outcome_missing, by cause.",
        labels=["finding", "cause"],
    )
    redispatches = CounterMetricFamily(
        "outcomes_redispatches",
        "Confirmed messages sent again on evidence that they were gone, by evidence "
        "(queue_lost, worker_rejected; dispatch_deadline: recorded before evidence was needed).",
        labels=["evidence"],
    )
    bounded: Counter[tuple[str, str]] = Counter()
    for (finding, cause), value in found.findings.items():
        kind = labels.one_of(finding, labels.FINDING_KINDS)
        bounded[kind, labels.one_of(cause, labels.CAUSES)] += value
    for (finding, cause), value in sorted(bounded.items()):
        findings.add_metric([finding, cause], value)
    for (finding, cause), value in sorted(bounded.items()):
        if finding == "redispatched":
            redispatches.add_metric([cause], value)
    yield findings
    yield redispatches


def _outbox(found: counts.LedgerCounts) -> Iterator[Metric]:
    summary = found.dispatch
    unconfirmed = GaugeMetricFamily(
        "outcomes_dispatch_unconfirmed",
        "Waiting jobs whose message the broker has not confirmed (the outbox publishes them).",
    )
    unconfirmed.add_metric([], summary.unconfirmed)
    oldest = GaugeMetricFamily(
        "outcomes_queue_oldest_wait_seconds",
        "How long the longest-waiting job has waited for a worker (0: none waits).",
    )
    since = summary.oldest_waiting_since
    oldest.add_metric([], max(0.0, (now() - since).total_seconds()) if since else 0.0)
    yield unconfirmed
    yield oldest


def _approvals(found: counts.LedgerCounts) -> Iterator[Metric]:
    """Calls parked for a person's approval (docs/approvals.md): how many, and how long the
    oldest has waited."""
    pending = GaugeMetricFamily(
        "outcomes_approvals_pending", "Calls awaiting a person's approval (not dispatched)."
    )
    parked = Status.AWAITING_APPROVAL.value
    pending.add_metric([], sum(g.jobs for g in found.jobs if g.status == parked))
    yield pending
    oldest = GaugeMetricFamily(
        "outcomes_approvals_oldest_seconds",
        "How long the oldest call awaiting approval has waited (0: none waits).",
    )
    since = found.oldest_approval
    oldest.add_metric([], max(0.0, (now() - since).total_seconds()) if since else 0.0)
    yield oldest


def _brakes(found: counts.LedgerCounts) -> Iterator[Metric]:
    brakes = GaugeMetricFamily(
        "outcomes_brakes_active", "Brakes pulled and not released, by scope.", labels=["scope"]
    )
    by_scope: dict[str, int] = {}
    for brake in found.brakes:
        by_scope[brake.scope] = by_scope.get(brake.scope, 0) + 1
    for scope, value in sorted(by_scope.items()):
        brakes.add_metric([scope], value)
    yield brakes

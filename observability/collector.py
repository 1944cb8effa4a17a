"""The ledger's own counts as Prometheus metrics, read at scrape time (`ledger.services.counts`).

Counters are honest: decisions and terminal outcomes are append-only facts, so their counts
never fall, and they equal `outcomes audit summary` by status and code whichever process is
scraped. Every API process reports the same ledger-wide values (aggregate with max, not sum).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from ledger.codes import Status
from ledger.errors import LedgerError
from ledger.services import counts
from ledger.services.ledger import Ledger

log = logging.getLogger(__name__)
OPEN = (Status.QUEUED.value, Status.RUNNING.value, Status.RETRYING.value)


class LedgerCollector:
    def __init__(self, ledger: Ledger, tally: counts.FindingTally) -> None:
        self.ledger = ledger
        self.tally = tally

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("outcomes_ledger_up", "1 if the ledger answered this scrape.")
        try:
            found = counts.read(self.ledger, self.tally)
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
        position = GaugeMetricFamily(
            "outcomes_ledger_position", "The ledger's last position (events recorded so far)."
        )
        position.add_metric([], found.position)
        yield position


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
    decided: dict[tuple[str, str, str], int] = {}
    waiting = dict.fromkeys(OPEN, 0)
    for group in found.jobs:
        code = group.code or ""
        if not group.accepted:
            key = ("refused", code, group.tool)
            decided[key] = decided.get(key, 0) + group.jobs
            continue
        key = ("accepted", "", group.tool)
        decided[key] = decided.get(key, 0) + group.jobs
        if group.status in waiting:
            waiting[group.status] += group.jobs
        else:
            outcomes.add_metric([group.status, code, group.tool], group.jobs)
    for labels, value in sorted(decided.items()):
        decisions.add_metric(list(labels), value)
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
        "outcomes_redispatches", "Accepted jobs sent to the broker again (never started in time)."
    )
    for (finding, cause), value in sorted(found.findings.items()):
        findings.add_metric([finding, cause], value)
    redispatches.add_metric(
        [], sum(v for (finding, _), v in found.findings.items() if finding == "redispatched")
    )
    yield findings
    yield redispatches


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

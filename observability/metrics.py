"""The metrics each process measures as things happen (latencies, failures), on
prometheus_client's default registry, fed through the core's telemetry port.

With PROMETHEUS_MULTIPROC_DIR set (a prefork worker), prometheus_client keeps every process's
values in files there and `process_collector()` sums them; without it they live in memory.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector

from ledger import telemetry
from ledger.settings import Settings
from observability import labels

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# From a fast tool to a long one or a stuck queue (seconds).
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
APPEND_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)

SUBMIT_TO_OUTCOME = Histogram(
    "outcomes_submit_to_outcome_seconds",
    "From a job's decision to its terminal outcome, observed where the outcome is recorded.",
    ["tool", "status"],
    buckets=LATENCY_BUCKETS,
)
QUEUE_WAIT = Histogram(
    "outcomes_queue_wait_seconds",
    "From a job's acceptance to its first start on a worker.",
    buckets=LATENCY_BUCKETS,
)
APPEND = Histogram(
    "outcomes_append_seconds",
    "Writing one group of job appends (decisions, outcomes) until it is durable.",
    buckets=APPEND_BUCKETS,
)
LEASE_RENEWALS_FAILED = Counter(
    "outcomes_lease_renewals_failed",
    "Lease renewals of running jobs that failed or found the lease taken.",
)
OUTCOMES_UNRECORDED = Counter(
    "outcomes_outcome_write_failures",
    "Outcomes a worker could not write (the tool ran; the reconciler will judge the job).",
    ["tool"],
)

SUBMITS_RATE_LIMITED = Counter(
    "outcomes_submits_rate_limited",
    "Submits refused over their account's rate (docs/fairness.md): nothing was recorded.",
)
CLAIMS_DEFERRED = Counter(
    "outcomes_claims_deferred",
    "Jobs deferred at claim: their account was at its concurrency limit (docs/fairness.md).",
)


class PrometheusTelemetry:
    def appended(self, seconds: float, jobs: int) -> None:
        APPEND.observe(seconds)

    def queue_waited(self, seconds: float) -> None:
        QUEUE_WAIT.observe(max(0.0, seconds))

    # Labels bounded (`observability.labels`): a job whose tool this process has not loaded
    # (a worker of another release) is `_other`, never a series of its own.
    def outcome_recorded(self, tool: str, status: str, seconds: float) -> None:
        bounded = SUBMIT_TO_OUTCOME.labels(
            tool=labels.tool(tool), status=labels.one_of(status, labels.STATUSES)
        )
        bounded.observe(max(0.0, seconds))

    def lease_renewal_failed(self) -> None:
        LEASE_RENEWALS_FAILED.inc()

    def outcome_unrecorded(self, tool: str) -> None:
        OUTCOMES_UNRECORDED.labels(tool=labels.tool(tool)).inc()

    def submit_rate_limited(self) -> None:
        SUBMITS_RATE_LIMITED.inc()

    def claim_deferred(self) -> None:
        CLAIMS_DEFERRED.inc()


def install() -> None:
    """Feed this process's metrics from the use cases (idempotent)."""
    if not isinstance(telemetry.telemetry(), PrometheusTelemetry):
        telemetry.install(PrometheusTelemetry())


def multiprocess() -> bool:
    return bool(os.environ.get(MULTIPROC_ENV))


class _Default:
    """prometheus_client's default registry, as one collector of another registry."""

    def collect(self) -> Iterable[Metric]:
        return REGISTRY.collect()


def process_collector(registry: CollectorRegistry) -> None:
    """Register this process's metrics (every process's, in multiprocess mode) on `registry`."""
    if multiprocess():
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry.register(_Default())


def check_worker(settings: Settings, pool: str) -> str | None:
    """Why a worker's metrics could not be served as configured, or None."""
    if settings.metrics_port is not None and pool == "prefork" and not multiprocess():
        return (
            f"OUTCOMES_METRICS_PORT with --pool prefork needs {MULTIPROC_ENV} (an empty "
            "directory of this worker's): each pool process writes its metrics there"
        )
    return None

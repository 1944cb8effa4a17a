"""A worker's logs and metrics (docs/operations.md), hooked to Celery's signals.

- OUTCOMES_LOG_FORMAT=json: Celery leaves logging to us and every line, Celery's own included,
  is one JSON object (in text mode Celery's usual format is kept).
- Every worker feeds its latency histograms and failure counters; with OUTCOMES_METRICS_PORT it
  serves them on that port (prefork: summed over its pool processes through
  PROMETHEUS_MULTIPROC_DIR).
"""

from __future__ import annotations

from typing import Any

from celery.signals import setup_logging, worker_init

from ledger.errors import ConfigurationError
from observability import exposition, logs, metrics, tracing
from workers import resources


def _json_logging(loglevel: Any = "INFO", **_: Any) -> None:
    logs.install("json", loglevel or "INFO")


if resources.settings().log_format == "json":
    # A receiver of setup_logging replaces Celery's own logging setup (in every pool process).
    setup_logging.connect(_json_logging, weak=False)


@worker_init.connect
def _metrics(**_: Any) -> None:
    """In the worker's main process, before its pool starts (pool processes inherit it)."""
    metrics.install()
    # Spans, when OTEL_* ask for them (docs/tracing.md); a prefork pool's processes inherit
    # the provider, whose batch processor the SDK starts again after the fork.
    tracing.install_from_env("outcome-ledger-worker")
    settings = resources.settings()
    if settings.metrics_port is not None:
        exposition.serve_process_metrics(settings.metrics_host, settings.metrics_port)


def check(pool: str) -> None:
    """Refuse, before starting, metrics a worker could not serve as configured."""
    if reason := metrics.check_worker(resources.settings(), pool):
        raise ConfigurationError(reason)
    tracing.install_from_env("outcome-ledger-worker")  # an exporter it cannot make: refused now

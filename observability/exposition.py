"""Where the metrics are read: the API's `/metrics` (the ledger's counts and the process's own
metrics) and a worker's own HTTP port (its process metrics, or its pool's in multiprocess
mode)."""

from __future__ import annotations

import weakref

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.exposition import start_http_server

from ledger.services.counts import FindingTally
from ledger.services.ledger import Ledger
from observability.collector import LedgerCollector
from observability.metrics import process_collector

CONTENT_TYPE = CONTENT_TYPE_LATEST
# One tally per open ledger: each scrape reads only the events since the previous one.
_tallies: weakref.WeakKeyDictionary[Ledger, FindingTally] = weakref.WeakKeyDictionary()


def scrape(ledger: Ledger) -> bytes:
    """The text exposition of the ledger's counts and this process's metrics."""
    tally = _tallies.setdefault(ledger, FindingTally())
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LedgerCollector(ledger, tally))
    process_collector(registry)
    return generate_latest(registry)


def serve_process_metrics(host: str, port: int) -> None:
    """Serve this process's metrics (every pool process's, in multiprocess mode) on a daemon
    thread: a worker's own `/metrics`."""
    registry = CollectorRegistry(auto_describe=False)
    process_collector(registry)
    start_http_server(port, addr=host, registry=registry)

"""Where the metrics are read: the API's `/metrics` (the ledger's counts and the process's own
metrics) and a worker's own HTTP port (its process metrics, or its pool's in multiprocess
mode)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, start_http_server

from ledger.runtime.ledger import Ledger
from observability.collector import LedgerCollector
from observability.metrics import process_collector

CONTENT_TYPES = ("text/plain", "application/openmetrics-text")  # as the scraper's Accept asks


def scrape(ledger: Ledger, accept: str = "") -> tuple[bytes, str]:
    """The ledger's counts and this process's metrics, in the format `accept` asks for (the
    classic text format unless OpenMetrics is asked for), and its content type."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LedgerCollector(ledger))
    process_collector(registry)
    encode, content_type = choose_encoder(accept)
    return encode(registry), content_type


def serve_process_metrics(host: str, port: int) -> None:
    """Serve this process's metrics (every pool process's, in multiprocess mode) on a daemon
    thread: a worker's own `/metrics`."""
    registry = CollectorRegistry(auto_describe=False)
    process_collector(registry)
    start_http_server(port, addr=host, registry=registry)

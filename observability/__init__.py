"""The operators' view of a running ledger: Prometheus metrics and structured log lines.

Shared by the adapters (api, workers, cli); imports ledger.services and the domain, never the
store, and nothing in ledger/ imports it."""

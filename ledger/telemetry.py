"""The telemetry port: what the use cases measure as it happens (latencies, failed lease
renewals), told to whatever the adapters installed (`observability.metrics` installs
Prometheus). The core knows no metrics library: the default does nothing.

Counts the ledger itself keeps (decisions, outcomes, findings, brakes) are not told here: a
collector reads them from the ledger at scrape time, so they hold across processes and restarts.
"""

from __future__ import annotations

from typing import Protocol


class Telemetry(Protocol):
    def appended(self, seconds: float, jobs: int) -> None:
        """A group of job appends (decisions, outcomes) became durable in `seconds`."""

    def queue_waited(self, seconds: float) -> None:
        """A job started `seconds` after it became runnable (accepted, or its retry due)."""

    def outcome_recorded(self, tool: str, status: str, seconds: float) -> None:
        """A job's terminal outcome was recorded `seconds` after its decision."""

    def lease_renewal_failed(self) -> None:
        """A running job's lease could not be renewed (the reconciler may judge it lost)."""

    def outcome_unrecorded(self, tool: str) -> None:
        """A tool ran but its outcome could not be written (the database stayed away)."""

    def submit_rate_limited(self) -> None:
        """A submit was refused over its account's rate (nothing recorded: counted here)."""

    def claim_deferred(self) -> None:
        """A job of an account at its concurrency limit was deferred at claim."""


class NoTelemetry:
    def appended(self, seconds: float, jobs: int) -> None:
        pass

    def queue_waited(self, seconds: float) -> None:
        pass

    def outcome_recorded(self, tool: str, status: str, seconds: float) -> None:
        pass

    def lease_renewal_failed(self) -> None:
        pass

    def outcome_unrecorded(self, tool: str) -> None:
        pass

    def submit_rate_limited(self) -> None:
        pass

    def claim_deferred(self) -> None:
        pass


_installed: list[Telemetry] = [NoTelemetry()]  # process-wide, like the metrics it feeds


def install(telemetry: Telemetry) -> Telemetry:
    """Make `telemetry` the process's; returns the one it replaces."""
    previous = _installed[0]
    _installed[0] = telemetry
    return previous


def telemetry() -> Telemetry:
    return _installed[0]

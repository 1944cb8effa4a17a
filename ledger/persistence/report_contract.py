"""The reads that report on the ledger rather than act on it: kept counts and summaries,
the console's silence and brakes, and the read models' rows as stored (for `audit verify`).
Part of the store's contract (`ledger.persistence.base`): `Reads` includes them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ledger.brake_view import BrakeView
from ledger.queries import (
    FindingCount,
    JobCount,
    JobSummary,
    MissingOutcome,
)


class ReportReads(ABC):
    """Counts, summaries and lists for people and checks; nothing decides from them."""

    # --- jobs, counted ----------------------------------------------------------------------

    # The counts below are kept as jobs change (migration 0017, `sql_counts.py`): each costs
    # the groups it reports (and, with since/until, the jobs created in the partial hours at the
    # range's ends), never a count of every job, and equals a GROUP BY over the jobs.

    @abstractmethod
    def summarize_jobs(
        self,
        account: str | None,
        tool: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> JobSummary:
        """Jobs by status, code, tool and account (created since/until, of one account and
        tool where given)."""

    @abstractmethod
    def count_statuses(
        self,
        account: str | None,
        tool: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> dict[str, int]:
        """How many jobs hold each status (created since/until, of one account and tool where
        given): `summarize_jobs` by status alone."""

    @abstractmethod
    def count_jobs(self) -> list[JobCount]:
        """Every job counted by (accepted, status, code, tool): the metrics' ledger counts."""

    @abstractmethod
    def count_findings(self) -> list[FindingCount]:
        """The reconciler's findings (its events of the types in `ledger.event_log.FINDINGS`)
        by type and cause, each with the newest one's time."""

    @abstractmethod
    def missing_outcomes(
        self, account: str | None, since: datetime, limit: int
    ) -> list[MissingOutcome]:
        """Jobs failed with OUTCOME_MISSING whose last change is at or after `since` (of one
        account, or all: None), most recent first, at most `limit` (the console's silence)."""

    # --- brakes, for people --------------------------------------------------------------

    @abstractmethod
    def recent_brakes(self, limit: int) -> list[BrakeView]:
        """Brakes active or released, as the brakes read model holds them (for people to
        read, never to decide), the most recently changed first, at most `limit`."""

    @abstractmethod
    def brakes_in_scope(self, scope: str) -> list[BrakeView]:
        """Every brake ever pulled in this scope, active or released, oldest first (a turn's
        halt, docs/turns.md, is pulled once)."""

    @abstractmethod
    def jobs_held(self, brake_ids: Sequence[str], account: str | None = None) -> dict[str, int]:
        """How many jobs each of these brakes refused or halted (BRAKE_ENGAGED naming it as
        the cause), of one account or all (None); brakes that held none are left out."""

    # --- read models, as stored -----------------------------------------------------------

    @abstractmethod
    def read_model_rows(self, table: str, after: str | None, limit: int) -> list[dict[str, Any]]:
        """A page of a read model's stored rows (`ledger.read_models`: jobs, brakes, tokens),
        keys above `after` (None: from the first), in key order, at most `limit`: every stored
        column by name, times as aware UTC datetimes, `view` as its decoded JSON. `audit
        verify` compares them with a fold of the events, so nothing may be normalized away."""

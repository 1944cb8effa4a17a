"""What a finished `outcomes audit verify` records, and what the console, `outcomes status` and
`/metrics` show of the last one: they read this record (one row, by its index) and never
verify anything themselves."""

from __future__ import annotations

import getpass
import socket
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ledger.clock import format_time

MAX_BY = 200  # the column's width
# What a verification covered: every event (`full`), the events after a trusted tree head plus
# the streams they touched (`since`, `audit verify --since HEAD`), or N events drawn at random,
# each proved against the head (`sample`): a statistical check, not a range checked.
FULL, SINCE, SAMPLE = "full", "since", "sample"
SCOPES = (FULL, SINCE, SAMPLE)


@dataclass(frozen=True)
class VerificationRecord:
    started_at: datetime
    finished_at: datetime
    first_position: int | None  # the range the ledger-order pass checked (None: empty ledger)
    last_position: int | None
    events: int
    streams: int
    ok: bool
    problems: int  # every problem found (chains, read models, digests)
    first_problem: str | None  # the one line `audit verify` exited with
    verified_by: str  # `--by NAME`, else the OS user and host
    with_digest: bool  # against `--digest` or `--against`
    scope: str = FULL  # one of SCOPES

    @property
    def covers_range(self) -> bool:
        """Whether it checked every event up to `last_position` (a sample did not)."""
        return self.scope != SAMPLE

    def to_json(self) -> dict[str, Any]:
        return {
            "started_at": format_time(self.started_at),
            "finished_at": format_time(self.finished_at),
            "first_position": self.first_position,
            "last_position": self.last_position,
            "events": self.events,
            "streams": self.streams,
            "ok": self.ok,
            "problems": self.problems,
            "first_problem": self.first_problem,
            "verified_by": self.verified_by,
            "with_digest": self.with_digest,
            "scope": self.scope,
        }


def who_verifies(given: str | None = None) -> str:
    """`given`, else `user@host` of this process (what an operator recognises in a list)."""
    if given:
        return given[:MAX_BY]
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a bare container)
        user = "unknown"
    return f"{user}@{socket.gethostname()}"[:MAX_BY]

"""What a tool returns (or raises): the tool authors' side of the outcome contract (contract §4).

A tool returns `Succeeded`, `Declined` or `Partial`, or raises `ToolFailure`. Anything else it
returns is not an outcome and is recorded as `OUTCOME_MISSING` (`no_outcome_returned`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ledger.errors import ToolFailure

__all__ = ["Declined", "Partial", "Succeeded", "ToolFailure"]


@dataclass(frozen=True)
class Succeeded:
    """The work was done; `result` is what the agent reads."""

    result: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Declined:
    """Success, nothing done on purpose, and why (the state is already what was wanted)."""

    reason: str
    result: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Partial:
    """Some of the work was done: the result, how many were processed, what was skipped."""

    result: dict[str, Any]
    processed: int
    skipped: list[str] = field(default_factory=list)
    total: int | None = None

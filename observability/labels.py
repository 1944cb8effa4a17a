"""Label values for the metrics, each from a bounded set: every series is a cost in Prometheus,
and a value an outsider chooses (the tool name of a refused job, above all: refused because
nobody loaded it) must not mint one.

- `tool`: a tool loaded in this process (OUTCOMES_TOOLS, enabled or not), else `OTHER`. No
  tool name can be `OTHER` (a tool name starts with a lowercase letter).
- `code`: a code of the contract (`ledger.codes.Code`), or empty; anything else `OTHER`.
- `status`, `finding`, `cause`, `evidence`: the values the ledger writes, else `OTHER`.

Brake scopes are not bounded here: only operators pull brakes (at the database, with the
CLI), each one by hand, and a scope names what they stopped.
"""

from __future__ import annotations

from ledger.codes import Code, OutcomeMissingCause, Status
from ledger.event_log import FINDINGS
from ledger.queueing import Evidence
from ledger.tools import get_tool

OTHER = "_other"
CODES = frozenset(code.value for code in Code)
STATUSES = frozenset(status.value for status in Status)
DECISIONS = frozenset({"accepted", "refused"})
FINDING_KINDS = frozenset(FINDINGS.values())
# Why the reconciler recorded a finding (`event_log.finding_cause`): an OUTCOME_MISSING cause,
# a re-dispatch's evidence, or the deadline of re-dispatches recorded before evidence was needed.
CAUSES = frozenset(
    {c.value for c in OutcomeMissingCause} | {e.value for e in Evidence} | {"dispatch_deadline"}
)


def tool(name: str) -> str:
    return name if get_tool(name) is not None else OTHER


def code(value: str | None) -> str:
    if not value:
        return ""
    return value if value in CODES else OTHER


def one_of(value: str, known: frozenset[str]) -> str:
    return value if value in known else OTHER

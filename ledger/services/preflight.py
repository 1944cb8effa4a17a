"""A dry run of a submit (`POST /v1/jobs` with `"dry_run": true`; over MCP
`outcome_preflight`): what the decision would be now, and why, recording nothing and counting
no quota (docs/turns.md, "Dry run").

The same rules as `submit`, read instead of written: the tool, the token's access, the
arguments, the budget, the secrets key, the brakes (the turn's too), the quota, the backlog,
and whether a person would have to approve the call. A dry run is a forecast, not a
reservation: a brake pulled, a quota spent or a backlog grown between it and the submit decides
the submit.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from ledger.brakes import brake_error, holding
from ledger.clock import now
from ledger.decisions import Caller, JobRequest, quota_refusal, retry_after, tool_refusal
from ledger.error_info import ErrorInfo
from ledger.runtime.ledger import Ledger
from ledger.runtime.outbox import Outbox
from ledger.services.submit import approval_ask, backlog_check, sealed_args, unsealable
from ledger.tools import get_tool
from ledger.uuid7 import new_id

Would = Literal["accepted", "awaiting_approval", "refused"]


@dataclass(frozen=True)
class Preflight:
    would: Would
    error: ErrorInfo | None = None
    approval_reason: str | None = None  # why a person would have to approve it

    def as_json(self) -> dict[str, object]:
        return {
            "would": self.would,
            "error": None if self.error is None else self.error.model_dump(mode="json"),
            "approval": None if self.approval_reason is None else {"reason": self.approval_reason},
        }


def preflight(
    ledger: Ledger, caller: Caller, request: JobRequest, outbox: Outbox | None = None
) -> Preflight:
    """What submitting `request` would decide now; nothing is recorded."""
    spec = get_tool(request.tool)
    gauge = outbox.backlog if outbox is not None else None
    backlog = gauge.current() if gauge is not None else None
    refusal = tool_refusal(spec, caller, request) or backlog_check(spec, request, backlog)
    if refusal is None:
        refusal = unsealable(request, sealed_args(ledger, spec, request, new_id()))
    if refusal is None:
        refusal = _store_refusal(ledger, caller, request)
    if refusal is not None:
        return Preflight("refused", refusal)
    ask = approval_ask(spec, request)
    if ask is not None:
        return Preflight("awaiting_approval", approval_reason=ask.reason)
    return Preflight("accepted")


def _store_refusal(ledger: Ledger, caller: Caller, request: JobRequest) -> ErrorInfo | None:
    """The checks the submit's append makes: a brake that holds, a quota used up."""
    spec = get_tool(request.tool)
    assert spec is not None  # tool_refusal refused an unknown tool
    with ledger.store.reading() as reads:
        held = holding(reads.active_brakes(), request.tool, caller.account, request.turn)
        if held:
            return brake_error(held[0])
        if spec.quota is None:
            return None
        moment = now()
        since = moment - timedelta(seconds=spec.quota.window_s)
        used, oldest = reads.accepted_in_window(caller.account, request.tool, since)
    if used < spec.quota.limit:
        return None
    wait = retry_after(oldest, spec.quota.window_s, moment) if oldest else spec.quota.window_s
    return quota_refusal(request.tool, spec.quota.limit, spec.quota.window_s, wait)

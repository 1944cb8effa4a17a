"""The tool catalog: what a token may call (agents read it before they submit), and every
tool for operators. The same registry and rules as the submit decision, so the catalog never
lists a tool that `submit` would refuse for being unknown, disabled or not granted."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ledger.access import ALL_ACCOUNTS
from ledger.clock import now
from ledger.decisions import Caller
from ledger.errors import NotAnAgentError
from ledger.runtime.ledger import Ledger
from ledger.token_view import TokenView
from ledger.tools import ToolSpec, registered_tools


@dataclass(frozen=True)
class QuotaInfo:
    limit: int
    window_s: int
    remaining: int | None  # None: no single account to count for (an operator's '*' token)


@dataclass(frozen=True)
class ToolEntry:
    name: str
    description: str
    args_schema: dict[str, Any]
    spends: bool
    timeout_s: float
    max_attempts: int
    start_within_s: float
    enabled: bool
    quota: QuotaInfo | None
    max_result_bytes: int
    approval: str | None = None  # "always", "conditional" or None (docs/approvals.md)
    approval_expires_s: float | None = None  # how long a parked call waits; None: no approval
    read_only: bool = False

    def as_json(self) -> dict[str, Any]:
        quota = self.quota
        return {
            "name": self.name,
            "description": self.description,
            "args_schema": self.args_schema,
            "spends": self.spends,
            "timeout_s": self.timeout_s,
            "max_attempts": self.max_attempts,
            "start_within_s": self.start_within_s,
            "max_result_bytes": self.max_result_bytes,
            "enabled": self.enabled,
            "approval": self.approval,
            "approval_expires_s": self.approval_expires_s,
            "read_only": self.read_only,
            "quota": None
            if quota is None
            else {"limit": quota.limit, "window_s": quota.window_s, "remaining": quota.remaining},
        }


def submitter(token: TokenView) -> Caller:
    """The caller a token submits as; NotAnAgentError for tokens that only read."""
    if token.role != "agent" or token.account == ALL_ACCOUNTS:
        raise NotAnAgentError()
    tools = frozenset(token.tools) if token.tools is not None else None
    return Caller(account=token.account, token_id=token.token_id, tools=tools)


def may_call(token: TokenView, spec: ToolSpec) -> bool:
    """The rule `submit` applies (enabled, and in the token's list if it has one)."""
    return spec.enabled and (token.tools is None or spec.name in token.tools)


def for_token(ledger: Ledger, token: TokenView) -> list[ToolEntry]:
    """The enabled tools this token may call, with what its account has left of each quota.
    An agent can call them; an operator's or auditor's token sees what its agents could."""
    specs = [spec for spec in registered_tools() if may_call(token, spec)]
    account = None if token.account == ALL_ACCOUNTS else token.account
    left = _remaining(ledger, account, specs)
    return [_entry(spec, left.get(spec.name)) for spec in specs]


def every_tool() -> list[ToolEntry]:
    """Every registered tool, enabled or not (operators: `outcomes tools list`)."""
    return [_entry(spec, None) for spec in registered_tools()]


def _remaining(ledger: Ledger, account: str | None, specs: list[ToolSpec]) -> dict[str, int]:
    metered = [spec for spec in specs if spec.quota is not None]
    if account is None or not metered:
        return {}
    moment = now()
    left: dict[str, int] = {}
    with ledger.store.reading() as reads:
        for spec in metered:
            assert spec.quota is not None
            since = moment - timedelta(seconds=spec.quota.window_s)
            used, _ = reads.accepted_in_window(account, spec.name, since)
            left[spec.name] = max(0, spec.quota.limit - used)
    return left


def _entry(spec: ToolSpec, remaining: int | None) -> ToolEntry:
    quota = spec.quota
    return ToolEntry(
        name=spec.name,
        description=spec.description,
        args_schema=spec.args_model.model_json_schema(),
        spends=spec.spends,
        timeout_s=spec.timeout_s,
        max_attempts=spec.max_attempts,
        start_within_s=spec.start_within_s,
        enabled=spec.enabled,
        quota=None if quota is None else QuotaInfo(quota.limit, quota.window_s, remaining),
        max_result_bytes=spec.max_result_bytes,
        approval=spec.approval_mode,
        approval_expires_s=spec.approval_expires_s if spec.approval_mode else None,
        read_only=spec.read_only,
    )

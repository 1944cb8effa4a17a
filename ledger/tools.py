"""The tools registry and the tool authors' API (contract §4).

    @tool("tracker.read_issue", spends=False, timeout_s=30, max_attempts=3)
    def read_issue(args: ReadIssue, ctx: ToolContext) -> Succeeded | Declined | Partial: ...

    @tool("tracker.fetch_issues", max_result_bytes=16_384)
    async def fetch_issues(args: FetchIssues, ctx: ToolContext) -> Succeeded: ...

The args model is the annotation of the function's first parameter; its `SecretStr` and
`SecretBytes` fields are the tool's secrets (`ledger.secrets`). An `async def` tool runs on the
worker's event loop under the same deadline, lease and outcome rules as a `def` one. What a
tool answers is kept within `max_result_bytes`, or the smaller budget the agent asked for
(`ctx.budget_bytes`; `ledger.budget`).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import re
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from ledger import budget
from ledger.errors import ConfigurationError
from ledger.queueing import DEFAULT_START_WITHIN_S, MAX_START_WITHIN_S, MIN_START_WITHIN_S

# \A and \Z, not ^ and $ (`$` also matches before a final newline): use it with fullmatch.
TOOL_NAME = re.compile(r"\A[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*\Z")


@dataclass(frozen=True)
class Quota:
    """At most `limit` accepted jobs per account for this tool in any `window_s` seconds."""

    limit: int
    window_s: int = 86400

    def __post_init__(self) -> None:
        if self.limit < 0 or self.window_s <= 0:
            raise ConfigurationError("Quota needs limit >= 0 and window_s > 0")


class ToolContext:
    """What a running tool may know and do about its job."""

    def __init__(
        self,
        *,
        job_id: str,
        attempt: int,
        idempotency_key: str,
        heartbeat: Callable[[], None],
        checkpoint: Callable[[], None],
        budget_bytes: int = budget.DEFAULT_MAX_RESULT_BYTES,
    ) -> None:
        self.job_id = job_id
        self.attempt = attempt
        # Stable across attempts: pass it to the downstream call so it can deduplicate.
        self.idempotency_key = idempotency_key
        self._heartbeat = heartbeat
        self._checkpoint = checkpoint
        # The bytes of JSON the answer may take (the tool's max_result_bytes, or less if the
        # agent asked for less): a bigger one is cut to fit, and the envelope says so.
        self.budget_bytes = budget_bytes

    def fits(self, result: Mapping[str, Any]) -> bool:
        """Whether `result` comes back whole within the budget."""
        return budget.fits(result, self.budget_bytes)

    def list_or_count(self, name: str, items: Sequence[Any], **beside: Any) -> dict[str, Any]:
        """A count instead of a list when the list does not fit: `{name: items, **beside}`,
        else `{name + "_count": len(items), **beside}`."""
        return budget.list_or_count(name, items, self.budget_bytes, **beside)

    @staticmethod
    def delta(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
        """The changes instead of the state: a JSON Merge Patch (RFC 7386) from `before`."""
        return budget.delta(before, after)

    def heartbeat(self) -> None:
        """Extend the job's lease now (it is also renewed in the background)."""
        self._heartbeat()

    def checkpoint(self) -> None:
        """Re-check the brake between steps of long work; raises `BrakeEngaged` if pulled."""
        self._checkpoint()

    # For `async def` tools: the same calls read the ledger, so they run on a thread instead
    # of blocking the event loop every async tool of the process shares.
    async def aheartbeat(self) -> None:
        """`heartbeat()` for async tools: `await ctx.aheartbeat()`."""
        await asyncio.to_thread(self._heartbeat)

    async def acheckpoint(self) -> None:
        """`checkpoint()` for async tools: `await ctx.acheckpoint()` raises `BrakeEngaged`."""
        await asyncio.to_thread(self._checkpoint)


ToolFunction = Callable[[Any, ToolContext], Any]
# `approval=fn`: given the call's validated arguments, the reason a person must look at this
# call before it runs, or None when it needs no approval (docs/approvals.md).
ApprovalRule = Callable[[Any], "str | None"]
DEFAULT_APPROVAL_EXPIRES_S = 86400.0  # a day, capped by the call's own start deadline
APPROVAL_ALWAYS_REASON = "this tool needs a person's approval for every call"


@dataclass(frozen=True)
class ToolSpec:
    name: str
    func: ToolFunction
    args_model: type[BaseModel]
    spends: bool = False
    timeout_s: float = 300.0
    max_attempts: int = 3
    quota: Quota | None = None
    enabled: bool = True
    description: str = field(default="")
    # The longest a job may wait for a worker before it is closed as never started; a caller
    # may ask for less (ledger.queueing).
    start_within_s: float = DEFAULT_START_WITHIN_S
    is_async: bool = False  # an `async def`: the worker awaits it on its event loop
    max_result_bytes: int = budget.DEFAULT_MAX_RESULT_BYTES
    # A person approves its calls before they run: every call (True) or those a rule names.
    approval: bool | ApprovalRule = False
    approval_expires_s: float = DEFAULT_APPROVAL_EXPIRES_S
    read_only: bool = False  # a pure read: no change anywhere (MCP's readOnlyHint)

    @property
    def approval_mode(self) -> str | None:
        """What the catalog says: "always", "conditional" or None."""
        if self.approval is True:
            return "always"
        return "conditional" if callable(self.approval) else None

    def approval_reason(self, args: Any) -> str | None:
        """Why this call must wait for a person (None: it need not). `args` is the validated
        arguments model. A rule that raises parks the call all the same: a check that could
        not say "no approval needed" has not said it."""
        if self.approval is True:
            return APPROVAL_ALWAYS_REASON
        if not callable(self.approval):
            return None
        try:
            reason = self.approval(args)
        except Exception as exc:
            return f"the tool's approval rule failed ({type(exc).__name__}), so a person decides"
        if reason is None:
            return None
        return str(reason).strip()[:500] or APPROVAL_ALWAYS_REASON


_REGISTRY: dict[str, ToolSpec] = {}


def tool(
    name: str,
    *,
    spends: bool = False,
    timeout_s: float = 300.0,
    max_attempts: int = 3,
    quota: Quota | None = None,
    enabled: bool = True,
    start_within_s: float = DEFAULT_START_WITHIN_S,
    max_result_bytes: int = budget.DEFAULT_MAX_RESULT_BYTES,
    approval: bool | ApprovalRule = False,
    approval_expires_s: float = DEFAULT_APPROVAL_EXPIRES_S,
    read_only: bool = False,
) -> Callable[[ToolFunction], ToolFunction]:
    """Register a tool. A spending tool is never retried (at most one `work.started`); its
    answers are kept within `max_result_bytes` of JSON (at most `budget.HARD_CAP_BYTES`). A
    job not started within `start_within_s` of its decision is closed as never started (a
    caller may ask for less, never more). `approval=True` parks every call for a person's
    approval, `approval=fn` the calls for which `fn(args)` names a reason; a parked call not
    decided within `approval_expires_s` (capped by its start deadline) is refused.
    `read_only=True` says the tool only reads (it cannot spend)."""
    if not TOOL_NAME.fullmatch(name):
        raise ConfigurationError(f"tool name {name!r} must look like 'area.verb_noun'")
    if timeout_s <= 0 or max_attempts < 1:
        raise ConfigurationError(f"tool {name}: timeout_s must be > 0 and max_attempts >= 1")
    if not MIN_START_WITHIN_S <= start_within_s <= MAX_START_WITHIN_S:
        raise ConfigurationError(
            f"tool {name}: start_within_s must be from {MIN_START_WITHIN_S:g} to "
            f"{MAX_START_WITHIN_S:g} seconds"
        )
    if not budget.MIN_BUDGET_BYTES <= max_result_bytes <= budget.HARD_CAP_BYTES:
        raise ConfigurationError(
            f"tool {name}: max_result_bytes must be from {budget.MIN_BUDGET_BYTES} to "
            f"{budget.HARD_CAP_BYTES}"
        )

    if not (approval is True or approval is False or callable(approval)):
        raise ConfigurationError(f"tool {name}: approval must be True, False or a function")
    if not MIN_START_WITHIN_S <= approval_expires_s <= MAX_START_WITHIN_S:
        raise ConfigurationError(
            f"tool {name}: approval_expires_s must be from {MIN_START_WITHIN_S:g} to "
            f"{MAX_START_WITHIN_S:g} seconds"
        )
    if read_only and spends:
        raise ConfigurationError(f"tool {name}: a read_only tool cannot spend")

    def register(func: ToolFunction) -> ToolFunction:
        if inspect.isasyncgenfunction(func) or inspect.isgeneratorfunction(func):
            raise ConfigurationError(f"tool {name}: a generator cannot return one outcome")
        spec = ToolSpec(
            name=name,
            func=func,
            args_model=_args_model(name, func),
            spends=spends,
            timeout_s=float(timeout_s),
            max_attempts=1 if spends else max_attempts,
            quota=quota,
            enabled=enabled,
            description=inspect.getdoc(func) or "",
            is_async=inspect.iscoroutinefunction(func),
            start_within_s=float(start_within_s),
            max_result_bytes=max_result_bytes,
            approval=approval,
            approval_expires_s=float(approval_expires_s),
            read_only=read_only,
        )
        existing = _REGISTRY.get(name)
        if existing is not None and existing.func.__qualname__ != func.__qualname__:
            raise ConfigurationError(f"tool {name!r} is registered twice")
        _REGISTRY[name] = spec
        return func

    return register


def _args_model(name: str, func: ToolFunction) -> type[BaseModel]:
    params = list(inspect.signature(func).parameters.values())
    hints = typing.get_type_hints(func)
    model = hints.get(params[0].name) if params else None
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise ConfigurationError(
            f"tool {name}: the first parameter must be annotated with a pydantic model"
        )
    return model


def get_tool(name: str) -> ToolSpec | None:
    return _REGISTRY.get(name)


def registered_tools() -> list[ToolSpec]:
    """Every registered tool, enabled or not, by name (the catalog lists them)."""
    return [_REGISTRY[name] for name in sorted(_REGISTRY)]


def tool_names() -> list[str]:
    """Every registered tool's name, sorted (what this process can run)."""
    return sorted(_REGISTRY)


def unregister(name: str) -> None:
    """For tests that register throwaway tools."""
    _REGISTRY.pop(name, None)


def load_tool_modules(modules: Iterable[str]) -> list[str]:
    """Import the modules named in OUTCOMES_TOOLS; their decorators register the tools."""
    loaded = []
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigurationError(f"OUTCOMES_TOOLS: cannot import {module!r}: {exc}") from None
        loaded.append(module)
    return loaded

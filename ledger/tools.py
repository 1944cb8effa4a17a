"""The tools registry and the tool authors' API (contract §4).

    @tool("tracker.read_issue", spends=False, timeout_s=30, max_attempts=3)
    def read_issue(args: ReadIssue, ctx: ToolContext) -> Succeeded | Declined | Partial: ...

    @tool("tracker.fetch_issues")
    async def fetch_issues(args: FetchIssues, ctx: ToolContext) -> Succeeded: ...

The args model is the annotation of the function's first parameter. An `async def` tool runs
on the worker's event loop under the same deadline, lease and outcome rules as a `def` one.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import re
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from ledger.errors import ConfigurationError

TOOL_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$")


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
    ) -> None:
        self.job_id = job_id
        self.attempt = attempt
        # Stable across attempts: pass it to the downstream call so it can deduplicate.
        self.idempotency_key = idempotency_key
        self._heartbeat = heartbeat
        self._checkpoint = checkpoint

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
    is_async: bool = False  # an `async def`: the worker awaits it on its event loop


_REGISTRY: dict[str, ToolSpec] = {}


def tool(
    name: str,
    *,
    spends: bool = False,
    timeout_s: float = 300.0,
    max_attempts: int = 3,
    quota: Quota | None = None,
    enabled: bool = True,
) -> Callable[[ToolFunction], ToolFunction]:
    """Register a tool. A spending tool is never retried (at most one `work.started`)."""
    if not TOOL_NAME.match(name):
        raise ConfigurationError(f"tool name {name!r} must look like 'area.verb_noun'")
    if timeout_s <= 0 or max_attempts < 1:
        raise ConfigurationError(f"tool {name}: timeout_s must be > 0 and max_attempts >= 1")

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

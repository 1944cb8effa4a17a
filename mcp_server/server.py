"""The MCP server: the tools a token may call, and two ledger tools beside them.

Each request names its token (`Identify`: the bearer token over HTTP, OUTCOMES_TOKEN over
stdio) and is checked like any `/v1` request, so a revoked token stops working mid-session.
A tool call is a job: `ledger.services.submit` records the decision, then the call waits up to
`_wait_s` (default 30 s, at most 60) for the outcome, reporting progress where the client asked
for it (a progressToken): when the job's status changes, and every few seconds.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, Field, ValidationError

from ledger.access import account_scope
from ledger.codes import Code
from ledger.decisions import JobRequest
from ledger.dispatch import Dispatcher
from ledger.error_info import ErrorInfo
from ledger.errors import (
    IdempotencyConflictError,
    InvalidCursorError,
    InvalidEventError,
    JobNotFoundError,
    NotAnAgentError,
    NotAuthenticatedError,
)
from ledger.job_view import JobView, envelope
from ledger.services import catalog, jobs
from ledger.services.ledger import Ledger
from ledger.services.submit import submit
from ledger.token_view import TokenView
from mcp_server.answers import envelope_schema, error_result, job_result
from mcp_server.names import OUTCOME_GET, OUTCOME_LIST, mcp_name, tool_name
from mcp_server.watch import Watcher

Context = ServerRequestContext[Any, Any]
Identify = Callable[[Context], Awaitable[TokenView]]

DEFAULT_WAIT_S = 30.0
MAX_WAIT_S = 60.0
HEARTBEAT_S = 5.0  # a progress notification at least this often while a call waits
WAIT_ARG = "_wait_s"
KEY_ARG = "_idempotency_key"
NOT_AUTHENTICATED = (
    "Not authenticated: this MCP server needs a ledger token (an agent token from "
    "`outcomes tokens create --role agent`): OUTCOMES_TOKEN for `outcomes mcp`, "
    "`Authorization: Bearer <token>` over HTTP."
)


class GetArgs(BaseModel):
    job_id: str = Field(description="The job id a tool call answered")
    wait_s: float = Field(0, ge=0, le=MAX_WAIT_S, description="Seconds to wait for the outcome")


class ListArgs(BaseModel):
    after: str | None = Field(None, description="A next_cursor from an earlier answer (opaque)")
    limit: int = Field(20, ge=1, le=100)


class JobPage(BaseModel):
    items: list[dict[str, Any]]
    next_cursor: str | None
    count: int
    truncated: bool


@dataclass(frozen=True)
class LedgerMcp:
    ledger: Ledger
    dispatcher: Dispatcher | None
    watcher: Watcher
    identify: Identify

    def build(self) -> Server[Any]:
        return Server(
            "outcome-ledger",
            version="1.0.0",
            instructions=(
                "Each tool call is a job recorded in the Outcome Ledger: read `status`, "
                "`next_action` and `error` of the answer. A call still running when its wait "
                f"ends answers its job_id: fetch it later with {OUTCOME_GET}."
            ),
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
        )

    async def caller(self, ctx: Context) -> TokenView:
        try:
            return await self.identify(ctx)
        except NotAuthenticatedError:
            raise MCPError(types.INVALID_REQUEST, NOT_AUTHENTICATED) from None

    async def list_tools(
        self, ctx: Context, _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        token = await self.caller(ctx)
        return types.ListToolsResult(tools=[*await self._job_tools(token), *ledger_tools()])

    async def _job_tools(self, token: TokenView) -> list[types.Tool]:
        try:
            catalog.submitter(token)
        except NotAnAgentError:
            return []  # operators and auditors read outcomes; they call no tool
        entries = await anyio.to_thread.run_sync(catalog.for_token, self.ledger, token)
        listed = []
        for entry in entries:
            name = mcp_name(entry.name)
            if name is not None:
                listed.append(job_tool(name, entry))
        return listed

    async def call_tool(
        self, ctx: Context, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        token = await self.caller(ctx)
        arguments = dict(params.arguments or {})
        if params.name == OUTCOME_GET:
            return await self._get(ctx, token, _parse(GetArgs, arguments))
        if params.name == OUTCOME_LIST:
            return await self._list(token, _parse(ListArgs, arguments))
        tool = tool_name(params.name)
        if tool is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool {params.name!r}")
        wait_s = _wait_budget(arguments.pop(WAIT_ARG, DEFAULT_WAIT_S))
        key = arguments.pop(KEY_ARG, None)
        try:
            caller = catalog.submitter(token)
            request = JobRequest(tool=tool, args=arguments, idempotency_key=_key(key))
            submitted = await anyio.to_thread.run_sync(
                submit, self.ledger, caller, request, self.dispatcher
            )
        except NotAnAgentError as exc:
            return error_result(_denied(str(exc)))
        except (IdempotencyConflictError, InvalidEventError) as exc:
            return error_result(_invalid(str(exc)))
        view, waited = await self._settle(ctx, token, submitted.view, wait_s)
        return job_result(view, waited)

    async def _get(self, ctx: Context, token: TokenView, args: GetArgs) -> types.CallToolResult:
        try:
            view = await anyio.to_thread.run_sync(jobs.get, self.ledger, args.job_id, token)
        except JobNotFoundError:
            return error_result(_not_found(args.job_id))
        view, waited = await self._settle(ctx, token, view, args.wait_s)
        return job_result(view, waited)

    async def _list(self, token: TokenView, args: ListArgs) -> types.CallToolResult:
        scope = account_scope(token.account)
        try:
            found = await anyio.to_thread.run_sync(
                jobs.changes, self.ledger, scope, args.after, args.limit + 1
            )
        except InvalidCursorError as exc:
            return error_result(_invalid(f"{exc}: pass a next_cursor from an earlier answer"))
        kept = found[: args.limit]
        page = JobPage(
            items=[envelope(view).model_dump(mode="json") for view, _ in kept],
            next_cursor=kept[-1][1] if kept else args.after,
            count=len(kept),
            truncated=len(found) > args.limit,
        )
        text = f"{page.count} jobs changed" + (
            f"; more follow: call {OUTCOME_LIST} with after={page.next_cursor!r}."
            if page.truncated
            else "."
        )
        return types.CallToolResult(
            content=[types.TextContent(text=text)], structured_content=page.model_dump()
        )

    async def _settle(
        self, ctx: Context, token: TokenView, view: JobView, budget: float
    ) -> tuple[JobView, float]:
        """Wait until the job is terminal or the budget is spent; the view and the wait."""
        started = anyio.current_time()
        if view.terminal or budget <= 0:
            return view, 0.0
        # Watch first, read second: a change committed in between still counts.
        with self.watcher.watch(view.job_id) as watch:
            view = await anyio.to_thread.run_sync(jobs.get, self.ledger, view.job_id, token)
            await _progress(ctx, view, 0.0, budget)
            while not view.terminal:
                left = started + budget - anyio.current_time()
                if left <= 0:
                    break
                watch.known_position = view.ledger_position
                if await watch.changed(min(left, HEARTBEAT_S)):
                    view = await anyio.to_thread.run_sync(jobs.get, self.ledger, view.job_id, token)
                await _progress(ctx, view, anyio.current_time() - started, budget)
        return view, anyio.current_time() - started


def job_tool(name: str, entry: catalog.ToolEntry) -> types.Tool:
    schema = dict(entry.args_schema)
    properties = dict(schema.get("properties", {}))
    properties[WAIT_ARG] = {
        "type": "number",
        "minimum": 0,
        "maximum": MAX_WAIT_S,
        "default": DEFAULT_WAIT_S,
        "description": "Seconds to wait for the outcome before answering with the job id",
    }
    properties[KEY_ARG] = {
        "type": "string",
        "maxLength": 200,
        "description": "Idempotency key: the same key and arguments answer the same job",
    }
    schema["properties"] = properties
    return types.Tool(
        name=name,
        description=entry.description or entry.name,
        input_schema=schema,
        output_schema=envelope_schema(),
        annotations=types.ToolAnnotations(title=entry.name),
    )


def ledger_tools() -> list[types.Tool]:
    return [
        types.Tool(
            name=OUTCOME_GET,
            description="A job's outcome envelope by job_id; wait_s waits for it to finish.",
            input_schema=GetArgs.model_json_schema(),
            output_schema=envelope_schema(),
            annotations=types.ToolAnnotations(read_only_hint=True),
        ),
        types.Tool(
            name=OUTCOME_LIST,
            description=(
                "Your account's jobs that changed after a cursor, oldest change first "
                "(the changes feed); pass next_cursor back as after."
            ),
            input_schema=ListArgs.model_json_schema(),
            output_schema=JobPage.model_json_schema(),
            annotations=types.ToolAnnotations(read_only_hint=True),
        ),
    ]


async def _progress(ctx: Context, view: JobView, elapsed: float, budget: float) -> None:
    # A no-op unless the client sent a progressToken with the call.
    await ctx.session.report_progress(
        progress=round(elapsed, 3), total=budget, message=f"job {view.job_id}: {view.status.value}"
    )


M = TypeVar("M", bound=BaseModel)


def _parse(model: type[M], arguments: dict[str, Any]) -> M:
    try:
        return model.model_validate(arguments)
    except ValidationError as exc:
        fields = ", ".join(".".join(map(str, e["loc"])) for e in exc.errors()) or "(arguments)"
        raise MCPError(types.INVALID_PARAMS, f"Invalid arguments: {fields}") from None


def _wait_budget(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MCPError(types.INVALID_PARAMS, f"{WAIT_ARG} must be a number of seconds")
    return min(max(float(value), 0.0), MAX_WAIT_S)


def _key(value: Any) -> str | None:
    if value is None or (isinstance(value, str) and 0 < len(value) <= 200):
        return value
    raise MCPError(types.INVALID_PARAMS, f"{KEY_ARG} must be a string of 1 to 200 characters")


def _denied(message: str) -> ErrorInfo:
    return ErrorInfo(
        code=Code.ACCESS_DENIED,
        operation="submit a job",
        required_capability="role:agent",
        fix="use an agent token of one account",
        message=message[0].upper() + message[1:] + ".",
    )


def _invalid(message: str) -> ErrorInfo:
    return ErrorInfo(
        code=Code.INPUT_INVALID,
        operation="submit a job",
        fix="correct the arguments",
        message=message[0].upper() + message[1:] + ".",
    )


def _not_found(job_id: str) -> ErrorInfo:
    return ErrorInfo(
        code=Code.REFERENCE_UNRESOLVED,
        dependency="ledger",
        operation="read the job",
        fix="pass a job_id that a call of this account answered",
        message=f"No job {job_id} for this token.",
    )

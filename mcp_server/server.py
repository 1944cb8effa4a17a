"""The MCP server: the tools a token may call, and two ledger tools beside them.

Each request names its token (`Identify`: the bearer token over HTTP, OUTCOMES_TOKEN over
stdio) and is checked like any `/v1` request, so a revoked token stops working mid-session.
A tool call is a job: `ledger.services.submit` records the decision, then the call waits up to
`_wait_s` (default 30 s, at most 60) for the outcome, reporting progress where the client asked
for it (a progressToken): when the job's status changes, and every few seconds. `_budget_bytes`
asks for a smaller answer than the tool's `max_result_bytes`, `_start_within_s` for a shorter
start deadline than the tool's (`mcp_server.options`).

Options out of range and calls that record no job are answered as tool errors (`isError`, the
typed error as structured content), not as protocol errors: the model reads the code and the
fix, and every answer matches the tool's declared output schema (`answers.or_error_only`).
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
from pydantic import BaseModel, ValidationError

from ledger.access import account_scope
from ledger.codes import Code, Status
from ledger.decisions import JobRequest, args_refusal
from ledger.dispatch import Dispatcher
from ledger.error_info import ErrorInfo
from ledger.errors import (
    IdempotencyConflictError,
    InvalidCursorError,
    InvalidEventError,
    JobNotFoundError,
    NotAnAgentError,
    NotAuthenticatedError,
    RateLimitedError,
)
from ledger.job_view import JobView, envelope
from ledger.json_limits import value_refusal
from ledger.runtime.ledger import Ledger
from ledger.runtime.outbox import Outbox
from ledger.runtime.settle import settle
from ledger.services import catalog, jobs
from ledger.services.submit import submit
from ledger.token_view import TokenView
from ledger.tracing import TraceRecord, parse_traceparent
from mcp_server import people, tasks
from mcp_server.answers import (
    error_result,
    job_not_found,
    job_result,
)
from mcp_server.cancel import CancelArgs, cancel_job
from mcp_server.names import (
    OUTCOME_CANCEL,
    OUTCOME_GET,
    OUTCOME_LIST,
    OUTCOME_PREFLIGHT,
    OUTCOME_TURN,
    mcp_name,
    tool_name,
)
from mcp_server.options import KEY_ARG, options_of
from mcp_server.people import (
    PreflightArgs,
    TurnArgs,
    preflight_call,
    turn_report,
)
from mcp_server.tasks import TaskMethods, cancel_task
from mcp_server.tool_list import GetArgs, JobPage, ListArgs, job_tool, ledger_tools
from mcp_server.watch import Watcher

Context = ServerRequestContext[Any, Any]
Identify = Callable[[Context], Awaitable[TokenView]]

HEARTBEAT_S = 5.0  # a progress notification at least this often while a call waits
NOT_AUTHENTICATED = (
    "Not authenticated: this MCP server needs a ledger token (an agent token from "
    "`outcomes tokens create --role agent`): OUTCOMES_TOKEN for `outcomes mcp`, "
    "`Authorization: Bearer <token>` over HTTP."
)


@dataclass(frozen=True)
class LedgerMcp:
    ledger: Ledger
    dispatcher: Dispatcher | Outbox | None
    watcher: Watcher
    identify: Identify

    def build(self) -> Server[Any]:
        server: Server[Any] = Server(
            "outcome-ledger",
            version="1.0.0",
            instructions=(
                "Each tool call is a job recorded in the Outcome Ledger: read `status`, "
                "`next_action` and `error` of the answer. A call still running when its wait "
                f"ends answers its job_id: fetch it later with {OUTCOME_GET}."
            ),
            on_list_tools=self.list_tools,
        )
        # Registered as a plain handler: for a client that declared MCP Tasks, a call may
        # answer a task handle instead of a CallToolResult (mcp_server.tasks).
        server.add_request_handler("tools/call", types.CallToolRequestParams, self.call_tool)
        TaskMethods(self.ledger, self.caller, cancel_task).install(server)
        return server

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
    ) -> types.CallToolResult | dict[str, Any]:
        token = await self.caller(ctx)
        arguments = dict(params.arguments or {})
        # The SDK parsed the request leniently (NaN, any depth): the HTTP door's rules here.
        # Depth 2: a call's arguments sit where `args` sits in POST /v1/jobs's body.
        if why := value_refusal(arguments, depth=2):
            return error_result(_invalid(f"the arguments are refused: {why}"))
        if params.name == OUTCOME_CANCEL:
            cancelling = _parse(params.name, CancelArgs, arguments)
            if isinstance(cancelling, ErrorInfo):
                return error_result(cancelling)
            return await cancel_job(self.ledger, token, cancelling)
        if params.name == OUTCOME_TURN:
            asked = _parse(params.name, TurnArgs, arguments)
            if isinstance(asked, ErrorInfo):
                return error_result(asked)
            return await turn_report(self.ledger, token, asked)
        if params.name == OUTCOME_PREFLIGHT:
            dry = _parse(params.name, PreflightArgs, arguments)
            if isinstance(dry, ErrorInfo):
                return error_result(dry)
            turn, _halt, _refused = people.turn_of(params.meta, _session_of(ctx))
            return await preflight_call(self.ledger, token, dry, turn)
        if params.name in (OUTCOME_GET, OUTCOME_LIST):
            model = GetArgs if params.name == OUTCOME_GET else ListArgs
            parsed = _parse(params.name, model, arguments)
            if isinstance(parsed, ErrorInfo):
                return error_result(parsed)
            if isinstance(parsed, GetArgs):
                return await self._get(ctx, token, parsed)
            assert isinstance(parsed, ListArgs)
            return await self._list(token, parsed)
        tool = tool_name(params.name)
        if tool is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool {params.name!r}")
        options = options_of(arguments)  # popped: what is left is the tool's arguments
        if isinstance(options, ErrorInfo):
            return error_result(options)
        turn, halt, refused = people.turn_of(params.meta, _session_of(ctx))
        if refused is not None:
            return error_result(refused)
        try:
            caller = catalog.submitter(token)
            request = JobRequest(
                tool=tool,
                args=arguments,
                idempotency_key=options.key,
                budget_bytes=options.budget_bytes,
                start_within_s=options.start_within_s,
                turn=turn,
                halt_on_failure=halt,
            )
            submitted = await anyio.to_thread.run_sync(
                submit, self.ledger, caller, request, self.dispatcher, _trace_of(ctx, params)
            )
        except NotAnAgentError as exc:
            return error_result(_denied(str(exc)))
        except IdempotencyConflictError as exc:
            return error_result(_key_reused(exc))
        except RateLimitedError as exc:  # nothing recorded (docs/fairness.md)
            return error_result(exc.error)
        except InvalidEventError as exc:
            return error_result(_invalid(str(exc)))
        # A client that follows tasks holds no call open past a moment: a job that has not
        # ended by then answers its task (tasks/get reads the same job).
        tasked = tasks.declared(params)
        wait = min(options.wait_s, tasks.TASK_AFTER_S) if tasked else options.wait_s
        if submitted.view.status is Status.AWAITING_APPROVAL:
            wait = 0.0  # parked for a person: its answer says so at once (docs/approvals.md)
        view, waited = await self._settle(ctx, token, submitted.view, wait)
        if tasked and not view.terminal:
            return tasks.handle(view)
        return job_result(view, waited)

    async def _get(self, ctx: Context, token: TokenView, args: GetArgs) -> types.CallToolResult:
        try:
            view = await anyio.to_thread.run_sync(jobs.get, self.ledger, args.job_id, token)
        except JobNotFoundError:
            return error_result(job_not_found(args.job_id, "read the job"))
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
        if view.terminal or budget <= 0:
            return view, 0.0
        job_id = view.job_id

        async def read() -> JobView:
            return await anyio.to_thread.run_sync(jobs.get, self.ledger, job_id, token)

        async def report(seen: JobView, elapsed: float) -> None:
            await _progress(ctx, seen, elapsed, budget)

        # Watch first, read second: a change committed in between still counts.
        with self.watcher.watch(job_id) as watch:
            view = await read()
            return await settle(watch, view, read, budget, tick_s=HEARTBEAT_S, progress=report)


def _session_of(ctx: Context) -> str | None:
    """The MCP session's id (the `Mcp-Session-Id` header), the turn of calls that name none."""
    request: Any = ctx.request
    headers = getattr(request, "headers", None)
    found = headers.get("mcp-session-id") if headers is not None else None
    return found if isinstance(found, str) and found else None


def _trace_of(ctx: Context, params: types.CallToolRequestParams) -> TraceRecord | None:
    """The caller's trace context: the call's `_meta.traceparent` (MCP's SEP-414, which the
    SDK's clients inject), else the HTTP request's `traceparent` header; a malformed one is
    ignored (W3C), never an error."""
    meta: Any = params.meta or {}
    found = parse_traceparent(_text(meta.get("traceparent")), _text(meta.get("tracestate")))
    request: Any = ctx.request
    headers = getattr(request, "headers", None)
    if found is None and headers is not None:
        found = parse_traceparent(headers.get("traceparent"), headers.get("tracestate"))
    return found


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


async def _progress(ctx: Context, view: JobView, elapsed: float, budget: float) -> None:
    # A no-op unless the client sent a progressToken with the call.
    await ctx.session.report_progress(
        progress=round(elapsed, 3), total=budget, message=f"job {view.job_id}: {view.status.value}"
    )


M = TypeVar("M", bound=BaseModel)


def _parse(name: str, model: type[M], arguments: dict[str, Any]) -> M | ErrorInfo:
    try:
        return model.model_validate(arguments)
    except ValidationError as exc:
        return args_refusal(name, exc)  # names the fields and the problem, never the values


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


def _key_reused(exc: IdempotencyConflictError) -> ErrorInfo:
    return ErrorInfo(
        code=Code.INPUT_INVALID,
        operation="submit a job",
        fix=f"send the arguments of job {exc.job_id} again to replay it, or use another "
        f"{KEY_ARG} for other arguments",
        message=f"The {KEY_ARG} was used for job {exc.job_id} with other arguments; "
        "nothing was submitted.",
    )

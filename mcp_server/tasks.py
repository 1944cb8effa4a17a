"""MCP Tasks (`io.modelcontextprotocol/tasks`, the 2026-07-28 extension): a tool call a client
may follow by polling instead of holding its request open.

The task is the ledger's job: its id is the job id, its state is read from the job's envelope
each time it is asked, so it survives any restart and any process answers for it (nothing is
kept in a server's memory). A client that declares the extension on a call (its per-request
`_meta` capabilities) gets the call's usual answer when the job ends within
`TASK_AFTER_S` (or its own shorter `_wait_s`), and a task handle otherwise; a client that does
not declare it never gets one. Then:

- `tasks/get`: `working` while the job waits or runs; `completed` at its outcome, with the
  tool call's answer as `result` (a failed or refused job is a completed task whose result
  says `isError`: the spec's `failed` is for protocol errors only); `cancelled` when the job
  was cancelled before it started.
- `tasks/cancel`: the job's cancel (`ledger.services.cancel`): a queued job is declined and
  never starts; one already running goes on (cancellation is cooperative; the ack is the same).
- `tasks/update`: nothing of ours asks for input, so there is nothing to answer: an empty ack.

An unknown task id, or another account's, is the same JSON-RPC error (invalid params).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import anyio.to_thread
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from pydantic import Field

from ledger.codes import Status
from ledger.errors import JobNotFoundError, NotCancellableError, ToolNotGrantedError
from ledger.job_view import JobView
from ledger.runtime.ledger import Ledger
from ledger.services import cancel, jobs
from ledger.services.cancel import CANCEL_ROLES
from ledger.token_view import TokenView
from mcp_server.answers import job_result

Context = ServerRequestContext[Any, Any]
Caller = Callable[[Context], Awaitable[TokenView]]
Cancel = Callable[[Ledger, TokenView, str], None]

EXTENSION = "io.modelcontextprotocol/tasks"
TASK_AFTER_S = 1.0  # a call still open after this answers a task, for a client that takes one
POLL_INTERVAL_MS = 1000  # the pace suggested to pollers


class TaskParams(types.RequestParams):
    task_id: str = Field(alias="taskId")


class UpdateParams(TaskParams):
    input_responses: dict[str, Any] = Field(default_factory=dict, alias="inputResponses")


def declared(params: types.RequestParams) -> bool:
    """Whether this request's client declared the extension (per request: MCP 2026-07-28)."""
    meta: Any = params.meta or {}
    capabilities = meta.get(types.CLIENT_CAPABILITIES_META_KEY) or {}
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    return isinstance(extensions, dict) and EXTENSION in extensions


def task_of(view: JobView, waited_s: float = 0.0) -> dict[str, Any]:
    """The task's state, read from its job: working, completed (with the call's answer) or
    cancelled."""
    task: dict[str, Any] = {
        "taskId": view.job_id,
        "status": "working",
        "statusMessage": _message(view),
        "createdAt": view.created_at.isoformat(),
        "lastUpdatedAt": view.updated_at.isoformat(),
        "ttlMs": None,  # the ledger keeps every job: no expiry
        "pollIntervalMs": POLL_INTERVAL_MS,
    }
    if view.status is Status.AWAITING_APPROVAL:
        # Parked for a person (docs/approvals.md): the input is an approver's, not the
        # client's, so no input is requested of it; the reason is in the message.
        task["status"] = "input_required"
        task["inputRequests"] = {}
    if view.terminal and view.cancelled is not None:
        task["status"] = "cancelled"
    elif view.terminal:
        task["status"] = "completed"
        answer = job_result(view, waited_s)
        task["result"] = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
    return task


def handle(view: JobView) -> dict[str, Any]:
    """What a call answers instead of its result: the task, created (the job is recorded)."""
    return {"resultType": "task", **task_of(view)}


def _message(view: JobView) -> str:
    job = f"job {view.job_id} ({view.tool})"
    if view.terminal:
        return f"{job} ended {view.status.value}"
    if view.status is Status.RUNNING:
        return f"{job} is running: poll tasks/get for its outcome"
    if view.status is Status.AWAITING_APPROVAL and view.approval is not None:
        return (
            f"{job} is awaiting a person's approval: {view.approval.reason} (until "
            f"{view.approval.expires_at.isoformat()}); poll tasks/get for its outcome"
        )
    return (
        f"{job} is {view.status.value}, waiting for a worker: poll tasks/get; tasks/cancel "
        "takes it back before it starts"
    )


class TaskMethods:
    """`tasks/get`, `tasks/cancel` and `tasks/update` over the ledger's jobs."""

    def __init__(self, ledger: Ledger, caller: Caller, cancel: Cancel) -> None:
        self._ledger = ledger
        self._caller = caller
        self._cancel = cancel

    def install(self, server: Server[Any]) -> None:
        server.extensions[EXTENSION] = {}
        server.add_request_handler("tasks/get", TaskParams, self.get)
        server.add_request_handler("tasks/cancel", TaskParams, self.cancel)
        server.add_request_handler("tasks/update", UpdateParams, self.update)

    async def get(self, ctx: Context, params: TaskParams) -> dict[str, Any]:
        view = await self._job(ctx, params.task_id)
        return {"resultType": "complete", **task_of(view)}

    async def cancel(self, ctx: Context, params: TaskParams) -> dict[str, Any]:
        token = await self._caller(ctx)
        if token.role not in CANCEL_ROLES:  # an auditor reads tasks; it cancels none
            raise MCPError(
                types.INVALID_REQUEST,
                f"Only {' and '.join(CANCEL_ROLES)} tokens cancel a task; this one is an "
                f"{token.role} token.",
            )
        try:
            await anyio.to_thread.run_sync(self._cancel, self._ledger, token, params.task_id)
        except JobNotFoundError:
            raise _unknown(params.task_id) from None
        except ToolNotGrantedError as exc:
            raise MCPError(types.INVALID_REQUEST, f"{str(exc).capitalize()}.") from None
        return {"resultType": "complete"}

    async def update(self, ctx: Context, params: UpdateParams) -> dict[str, Any]:
        await self._job(ctx, params.task_id)  # an unknown task is an error; input is ignored
        return {"resultType": "complete"}

    async def _job(self, ctx: Context, task_id: str) -> JobView:
        token = await self._caller(ctx)
        try:
            return await anyio.to_thread.run_sync(jobs.get, self._ledger, task_id, token)
        except JobNotFoundError:
            raise _unknown(task_id) from None


def cancel_task(ledger: Ledger, token: TokenView, task_id: str) -> None:
    """The job's cancel as tasks/cancel asks it: a job that has started or ended is not
    changed, and the ack is the same (the spec's cancellation is cooperative; the task then
    ends as its job does)."""
    with contextlib.suppress(NotCancellableError):
        cancel.cancel(ledger, task_id, cancel.Canceller.of_token(token), "MCP tasks/cancel")


def _unknown(task_id: str) -> MCPError:
    return MCPError(types.INVALID_PARAMS, f"No task {task_id} for this token.")

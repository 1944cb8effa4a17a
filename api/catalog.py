"""`GET /v1/tools`: the tools this token may call, so an agent learns names, arguments and
limits from the ledger instead of from a prompt (`ledger.services.catalog`)."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from api.auth import Principal
from api.openapi import problems
from api.pages import json_response
from api.state import state_of
from ledger.services import catalog

router = APIRouter(tags=["tools"])


class QuotaModel(BaseModel):
    limit: int
    window_s: int
    remaining: int | None = Field(description="What this account has left now; null for '*'")


class ToolModel(BaseModel):
    name: str
    description: str = Field(description="The tool's docstring")
    args_schema: dict[str, Any] = Field(
        description="JSON Schema of the job's `args`; its secrets say `format: password`, "
        "`writeOnly: true`"
    )
    spends: bool
    timeout_s: float
    max_attempts: int
    start_within_s: float = Field(
        description="The longest a job may wait for a worker (a caller may ask for less)"
    )
    max_result_bytes: int = Field(
        description="The most an answer takes, as JSON; `budget_bytes` may ask for less"
    )
    enabled: bool
    approval: Literal["always", "conditional"] | None = Field(
        description="A person approves every call (always), the calls the tool names "
        "(conditional), or none (null): docs/approvals.md"
    )
    approval_expires_s: float | None = Field(
        description="How long a parked call waits for a decision (capped by its start "
        "deadline); null without approval"
    )
    read_only: bool = Field(description="The tool only reads: it changes nothing anywhere")
    quota: QuotaModel | None


class ToolCatalog(BaseModel):
    tools: list[ToolModel]


@router.get(
    "/v1/tools",
    response_model=ToolCatalog,
    summary="The tools this token may call (its tool list and the enabled tools)",
    responses=problems(401, 503),
)
async def list_tools(request: Request, caller: Principal) -> Response:
    entries = await run_in_threadpool(catalog.for_token, state_of(request).ledger, caller)
    return json_response({"tools": [entry.as_json() for entry in entries]})

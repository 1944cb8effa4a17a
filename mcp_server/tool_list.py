"""What the MCP server lists: each tool a token may call, declared from its catalog entry
(its arguments, the call options, the outcome envelope), and the ledger's own tools beside
them with their arguments (`mcp_server.server` answers the calls)."""

from __future__ import annotations

from typing import Any

import mcp_types as types
from pydantic import BaseModel, Field

from ledger.services import catalog
from mcp_server.answers import (
    envelope_schema,
    or_error_only,
)
from mcp_server.cancel import CANCEL_TOOL
from mcp_server.names import (
    OUTCOME_GET,
    OUTCOME_LIST,
)
from mcp_server.options import MAX_WAIT_S, option_schemas
from mcp_server.people import (
    PREFLIGHT_TOOL,
    TURN_TOOL,
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


def job_tool(name: str, entry: catalog.ToolEntry) -> types.Tool:
    schema = dict(entry.args_schema)
    properties = dict(schema.get("properties", {}))
    properties |= option_schemas(entry)
    schema["properties"] = properties
    return types.Tool(
        name=name,
        description=entry.description or entry.name,
        input_schema=schema,
        output_schema=envelope_schema(),
        # From the tool's own declarations (docs/approvals.md): a pure read changes nothing
        # and may be repeated; a tool that spends may not be undone.
        annotations=types.ToolAnnotations(
            title=entry.name,
            read_only_hint=entry.read_only,
            destructive_hint=entry.spends,
            idempotent_hint=entry.read_only,
        ),
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
            output_schema=or_error_only(JobPage.model_json_schema(mode="serialization")),
            annotations=types.ToolAnnotations(read_only_hint=True),
        ),
        CANCEL_TOOL,
        TURN_TOOL,
        PREFLIGHT_TOOL,
    ]

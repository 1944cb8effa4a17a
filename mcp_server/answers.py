"""A job's envelope as an MCP tool result: the envelope itself as structured content, and one
paragraph that tells the model what happened and what to do next. Succeeded, declined and
partial are not errors; refused and failed are (`isError`), with the typed error; a job still
open when the wait ran out is not an error either: the answer says how to fetch it."""

from __future__ import annotations

from typing import Any

import mcp_types as types
import orjson

from ledger.codes import Status
from ledger.error_info import ErrorInfo
from ledger.job_view import JobEnvelope, JobView, envelope
from mcp_server.names import OUTCOME_GET

ERROR_STATUSES = (Status.REFUSED, Status.FAILED)
MAX_RESULT_CHARS = 2000  # the paragraph quotes the result up to this; the structure has it all


def envelope_schema() -> dict[str, Any]:
    return JobEnvelope.model_json_schema(mode="serialization")


def job_result(view: JobView, waited_s: float) -> types.CallToolResult:
    shown = envelope(view)
    return types.CallToolResult(
        content=[types.TextContent(text=paragraph(shown, waited_s))],
        structured_content=shown.model_dump(mode="json"),
        is_error=view.status in ERROR_STATUSES,
    )


def error_result(error: ErrorInfo) -> types.CallToolResult:
    """A call that recorded no job (a token that may not submit, a reused idempotency key)."""
    text = f"{error.code.value}: {error.message}" + (f" Fix: {error.fix}." if error.fix else "")
    return types.CallToolResult(
        content=[types.TextContent(text=text)],
        structured_content={"error": error.model_dump(mode="json")},
        is_error=True,
    )


def paragraph(shown: JobEnvelope, waited_s: float) -> str:
    job = f"{shown.tool} (job {shown.job_id})"
    action = f"Next action: {shown.next_action.value}."
    if shown.status is Status.SUCCEEDED:
        return f"{job} succeeded. Result: {_json(shown.result)}. {action}"
    if shown.status is Status.DECLINED:
        return f"{job} declined: {shown.declined_reason}. Result: {_json(shown.result)}. {action}"
    if shown.status is Status.PARTIAL and shown.partial is not None:
        part = shown.partial
        of = f" of {part.total}" if part.total is not None else ""
        return (
            f"{job} did part of the work: {part.processed}{of} processed, skipped "
            f"{_json(part.skipped)}. Result: {_json(shown.result)}. {action}"
        )
    if shown.error is not None and shown.status in ERROR_STATUSES:
        error = shown.error
        fix = f" Fix: {error.fix}." if error.fix else ""
        return f"{job} {shown.status.value} with {error.code.value}: {error.message}{fix} {action}"
    return (
        f"{job} is still {shown.status.value} after {waited_s:.0f} s; that is not an error. "
        f"Call {OUTCOME_GET} with job_id {shown.job_id!r} (and wait_s up to 60) to fetch its "
        f"outcome. {action}"
    )


def _json(value: Any) -> str:
    text = orjson.dumps(value).decode()
    return text if len(text) <= MAX_RESULT_CHARS else text[:MAX_RESULT_CHARS] + "…"

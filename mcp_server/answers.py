"""A job's envelope as an MCP tool result: the envelope itself as structured content, and one
paragraph that tells the model what happened and what to do next. Succeeded, declined and
partial are not errors; refused and failed are (`isError`), with the typed error; a job still
open when the wait ran out is not an error either: the answer says how to fetch it.

A call that recorded no job (an unknown job id, a cursor the ledger did not issue, a reused
idempotency key, options out of range) answers `{"error": {...}}`, the typed error alone. Every
tool's output schema declares both shapes (`or_error_only`): clients that check structured
content against it (the official TypeScript SDK does, errors included) accept either."""

from __future__ import annotations

from typing import Any

import mcp_types as types
import orjson

from ledger.codes import Code, Status
from ledger.error_info import ErrorInfo, sentence
from ledger.job_view import JobEnvelope, JobView, envelope
from mcp_server.names import OUTCOME_GET

ERROR_STATUSES = (Status.REFUSED, Status.FAILED)
MAX_RESULT_CHARS = 2000  # the paragraph quotes the result up to this; the structure has it all


def envelope_schema() -> dict[str, Any]:
    return or_error_only(JobEnvelope.model_json_schema(mode="serialization"))


def or_error_only(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` (an object with every property required), or an object holding only `error`
    (an `ErrorInfo`): what a call answers when it recorded no job."""
    error_info = ErrorInfo.model_json_schema(mode="serialization")
    defs = dict(error_info.pop("$defs", {})) | dict(schema.get("$defs", {}))
    defs.setdefault("ErrorInfo", error_info)
    error_ref = {"$ref": "#/$defs/ErrorInfo"}
    properties = dict(schema["properties"])
    properties.setdefault("error", {"anyOf": [error_ref, {"type": "null"}]})
    return {
        "type": "object",
        "title": schema.get("title", "Answer"),
        "description": (
            f"{schema.get('description') or schema.get('title', 'The answer')}. "
            "A call that recorded no job answers only `error` (its code, fix and message)."
        ),
        "properties": properties,
        "anyOf": [
            {"required": list(schema.get("required", []))},
            {
                "properties": {"error": error_ref},
                "required": ["error"],
                "additionalProperties": False,
            },
        ],
        "$defs": defs,
    }


def or_refused(schema: dict[str, Any]) -> dict[str, Any]:
    """`or_error_only` for a request about a job (a cancel), with a third shape: `error` and
    `job`, the job's envelope, when the request was refused and left the job as it was."""
    answer = or_error_only(schema)
    defs = answer["$defs"]
    defs.setdefault(
        "JobEnvelope", {k: v for k, v in schema.items() if k != "$defs"}
    )  # the envelope's own $defs are the answer's already
    job_ref = {"$ref": "#/$defs/JobEnvelope"}
    answer["properties"]["job"] = job_ref
    error_ref = {"$ref": "#/$defs/ErrorInfo"}
    answer["anyOf"].insert(
        1,
        {
            "properties": {"error": error_ref, "job": job_ref},
            "required": ["error", "job"],
            "additionalProperties": False,
        },
    )
    answer["description"] += " A refused request answers `error` and `job`, the job as it is."
    return answer


def cancel_schema() -> dict[str, Any]:
    return or_refused(JobEnvelope.model_json_schema(mode="serialization"))


def job_result(view: JobView, waited_s: float) -> types.CallToolResult:
    shown = envelope(view)
    return types.CallToolResult(
        content=[types.TextContent(text=paragraph(shown, waited_s))],
        structured_content=shown.model_dump(mode="json"),
        is_error=view.status in ERROR_STATUSES,
    )


def error_result(error: ErrorInfo) -> types.CallToolResult:
    """A call that recorded no job (a token that may not submit, a reused idempotency key)."""
    fix = f" Fix: {sentence(error.fix)}" if error.fix else ""
    text = f"{error.code.value}: {sentence(error.message)}{fix}"
    return types.CallToolResult(
        content=[types.TextContent(text=text)],
        structured_content={"error": error.model_dump(mode="json")},
        is_error=True,
    )


def refused_result(error: ErrorInfo, job: dict[str, Any]) -> types.CallToolResult:
    """A request about a job that was refused and left it as it was: the typed error, and the
    job's envelope beside it."""
    fix = f" Fix: {sentence(error.fix)}" if error.fix else ""
    text = f"{error.code.value}: {sentence(error.message)}{fix}"
    return types.CallToolResult(
        content=[types.TextContent(text=text)],
        structured_content={"error": error.model_dump(mode="json"), "job": job},
        is_error=True,
    )


def job_not_found(job_id: str, operation: str) -> ErrorInfo:
    """No such job for this token (another account's is the same answer)."""
    return ErrorInfo(
        code=Code.REFERENCE_UNRESOLVED,
        dependency="ledger",
        operation=operation,
        fix="pass a job_id that a call of this account answered",
        message=f"No job {job_id} for this token.",
    )


def paragraph(shown: JobEnvelope, waited_s: float) -> str:
    job = f"{shown.tool} (job {shown.job_id})"
    action = f"Next action: {shown.next_action.value}."
    budgeted = f" {shown.budget.narrow}" if shown.budget is not None else ""
    if shown.status is Status.SUCCEEDED:
        return f"{job} succeeded. Result: {_json(shown.result)}.{budgeted} {action}"
    if shown.status is Status.DECLINED:
        return (
            f"{job} declined: {shown.declined_reason}. Result: {_json(shown.result)}."
            f"{budgeted} {action}"
        )
    if shown.status is Status.PARTIAL and shown.partial is not None:
        part = shown.partial
        of = f" of {part.total}" if part.total is not None else ""
        return (
            f"{job} did part of the work: {part.processed}{of} processed, skipped "
            f"{_json(part.skipped)}. Result: {_json(shown.result)}.{budgeted} {action}"
        )
    if shown.error is not None and shown.status in ERROR_STATUSES:
        error = shown.error
        fix = f" Fix: {sentence(error.fix)}" if error.fix else ""
        said = sentence(error.message)
        return f"{job} {shown.status.value} with {error.code.value}: {said}{fix} {action}"
    if shown.status is Status.AWAITING_APPROVAL and shown.approval is not None:
        return (
            f"{job} is awaiting a person's approval: {sentence(shown.approval.reason)} It runs "
            f"only once an approver approves it (until {shown.approval.expires_at.isoformat()})"
            f"; that is not an error. Call {OUTCOME_GET} with job_id {shown.job_id!r} (and "
            f"wait_s up to 60) to fetch its outcome. {action}"
        )
    return (
        f"{job} is still {shown.status.value} after {spoken_seconds(waited_s)} s; that is not "
        f"an error. Call {OUTCOME_GET} with job_id {shown.job_id!r} (and wait_s up to 60) to "
        f"fetch its outcome. {action}"
    )


def spoken_seconds(seconds: float) -> str:
    """A wait as a person reads it: whole seconds from 10 s on, else to the hundredth without
    trailing zeros (0.5, not the 0 or 1 whole seconds would round it to; 0 for no wait)."""
    if seconds >= 10:
        return f"{seconds:.0f}"
    return f"{round(max(seconds, 0.0), 2):g}"


def _json(value: Any) -> str:
    text = orjson.dumps(value).decode()
    return text if len(text) <= MAX_RESULT_CHARS else text[:MAX_RESULT_CHARS] + "…"

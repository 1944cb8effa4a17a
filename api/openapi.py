"""/openapi.json that tells the truth: every error response is problem+json with its headers.

Routes declare their error statuses with `problems(...)`; `build_openapi` then moves those
bodies to `application/problem+json` and documents the headers that go with them.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from api.problems import PROBLEM_JSON, Problem

DESCRIPTIONS = {
    400: "The request body is not well-formed JSON (INPUT_INVALID).",
    401: "No valid token: missing, unknown or revoked (ACCESS_DENIED).",
    403: "The token's role, account or tools do not allow this (ACCESS_DENIED).",
    404: "No such job for this token: unknown ids and other accounts' ids get the same body "
    "(REFERENCE_UNRESOLVED).",
    410: "This token's job, archived out of the database (`outcomes archive`): the body says "
    "when; its events are in the archive's files (REFERENCE_UNRESOLVED).",
    409: "Refused and recorded, with its job_id: a brake holds this work (BRAKE_ENGAGED).",
    413: "The request body is larger than the limit (INPUT_INVALID).",
    415: "The request body is not JSON (INPUT_INVALID).",
    422: "Wrong types, missing fields or nesting too deep (INPUT_INVALID, INPUT_MISSING).",
    429: "Refused and recorded, with its job_id: the tool's quota is used up (QUOTA_EXCEEDED).",
    503: "The ledger's database is unavailable (SOURCE_UNRELIABLE); retry after Retry-After.",
}
SUBMIT_DESCRIPTIONS = {
    403: "Refused and recorded, with its job_id: this token may not call the tool; or the "
    "token is not an agent's token of one account (then job_id is null) (ACCESS_DENIED).",
    422: "Refused and recorded, with its job_id: the tool is unavailable (CAPABILITY_UNAVAILABLE)"
    " or the args miss or break its schema (INPUT_MISSING, INPUT_INVALID); or the body itself"
    " breaks the request's schema (or holds an integer beyond 64 bits), or its idempotency key"
    " was used with another body (job_id null).",
    429: "Refused and recorded, with its job_id: the tool's quota is used up, or the backlog "
    "would not start it in time (QUOTA_EXCEEDED); or the account submits faster than its rate "
    "limit (cause rate_limit): then nothing is recorded and job_id is null.",
}

_RETRY_AFTER = {
    "description": "Whole seconds to wait before trying again",
    "required": True,
    "schema": {"type": "string", "pattern": "^[0-9]+$"},
}
HEADERS: dict[int, dict[str, Any]] = {
    401: {
        "WWW-Authenticate": {
            "description": 'Bearer: `Bearer error="invalid_token"` when a token was presented '
            "and refused (RFC 6750), `Bearer` when none was",
            "required": True,
            "schema": {"type": "string"},
        }
    },
    429: {"Retry-After": _RETRY_AFTER},
    503: {"Retry-After": _RETRY_AFTER},
}


def problems(*statuses: int, overrides: dict[int, str] | None = None) -> dict[int | str, Any]:
    """The `responses=` entry of a route for these error statuses."""
    texts = DESCRIPTIONS | (overrides or {})
    return {status: {"model": Problem, "description": texts[status]} for status in statuses}


def build_openapi(app: FastAPI) -> dict[str, Any]:
    if app.openapi_schema is None:
        schema = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        for path_item in schema["paths"].values():
            for operation in path_item.values():
                if "requestBody" in operation:  # whatever reads a body can find it no JSON
                    operation["responses"].setdefault("400", {"description": DESCRIPTIONS[400]})
                _problem_bodies(operation["responses"])
        # FastAPI's own validation-error shapes are never sent: every 422 is a Problem.
        for unused in ("HTTPValidationError", "ValidationError"):
            schema["components"]["schemas"].pop(unused, None)
        app.openapi_schema = schema
    return app.openapi_schema


def _problem_bodies(responses: dict[str, Any]) -> None:
    # FastAPI adds a 422 to every route with parameters; routes that can answer 422 declare
    # theirs, so an added one is a response that never happens (a path string always parses).
    if responses.get("422", {}).get("description") == "Validation Error":
        del responses["422"]
    for status, response in responses.items():
        code = int(status)
        if code < 400:
            continue
        # A route's own kind of Problem (one with extension members) keeps its schema.
        declared = response.get("content", {}).get("application/json", {}).get("schema")
        schema = declared or {"$ref": "#/components/schemas/Problem"}
        response["content"] = {PROBLEM_JSON: {"schema": schema}}
        if code in HEADERS:
            response["headers"] = HEADERS[code]

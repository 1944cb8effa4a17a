"""The agents' two hottest routes, served without the framework's stack.

An agent's call is `POST /v1/jobs` and one `GET /v1/jobs/{id}?wait=…&until=terminal`. Through
FastAPI each request crosses a dozen layers (error, telemetry and body-limit middlewares,
exception handlers, routers, dependency solving) that cost more CPU than the request's own
work. Here those two requests go straight to the same route functions: the same checks in the
same order, the same answers, and an error is answered by the same handlers
(`handlers.answer_error`). The body limit still wraps the submit.

Only what is plainly valid takes this way. A query the route would refuse, or any other
method or path, goes through the framework as before, so every 4xx it answers stays its own.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qsl

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from api import handlers, jobs_read, jobs_submit
from api.limits import BodyLimitMiddleware

Endpoint = Callable[[Request], Awaitable[Response]]

JOBS = "/v1/jobs"
_JOB = JOBS + "/"
_UNTIL = ("change", "terminal")
_DECIMAL = re.compile(r"[0-9]{1,9}(?:\.[0-9]{1,9})?")


def fast_endpoint(scope: Scope) -> Endpoint | None:
    """The route function for this request, when it is one of the two and plainly valid;
    None: let the framework route it."""
    path = _route_path(scope)
    method = scope["method"]
    if method == "POST" and path == JOBS:
        return jobs_submit.submit_job
    if method != "GET" or not path.startswith(_JOB):
        return None
    job_id = path[len(_JOB) :]
    if not job_id or "/" in job_id:
        return None
    query = _read_query(scope.get("query_string", b""))
    if query is None:
        return None
    wait, until = query

    async def read(request: Request) -> Response:
        return await jobs_read.read_job(request, job_id, wait, until)  # type: ignore[arg-type]

    return read


def _route_path(scope: Scope) -> str:
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def _read_query(raw: bytes) -> tuple[float, str] | None:
    """`wait` and `until` as the route declares them (0 <= wait <= MAX_WAIT_S, a finite
    number; until one of two words); None for anything else, repeated keys included."""
    wait, until = 0.0, "change"
    seen: set[str] = set()
    for key, value in parse_qsl(raw.decode("latin-1"), keep_blank_values=True):
        if key in seen and key in ("wait", "until"):
            return None
        seen.add(key)
        if key == "wait":
            # Plain decimals only: any other spelling is the framework's to accept or refuse.
            if _DECIMAL.fullmatch(value) is None:
                return None
            wait = float(value)
            if wait > jobs_read.MAX_WAIT_S:
                return None
        elif key == "until":
            if value not in _UNTIL:
                return None
            until = value
        else:  # the framework refuses a parameter the route does not take (api.queries)
            return None
    return wait, until


class FastPath:
    """Serves a request `fast_endpoint` chose, as the framework would have."""

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self._app = app  # the FastAPI app: what `Request.app` and `state_of` see
        self._limited = BodyLimitMiddleware(self._serve, max_bytes=max_body_bytes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send, route: Endpoint) -> None:
        scope["app"] = self._app
        scope["fast_endpoint"] = route
        await self._limited(scope, receive, send)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            response = await scope["fast_endpoint"](request)
        except ClientDisconnect:
            return  # nobody to answer; a submit that read no body recorded nothing
        except Exception as exc:
            response = await handlers.answer_error(request, exc)
        await response(scope, receive, send)

"""The console's routes under `/console`, and `mount`, which the API calls to serve them beside
`/v1` (one app, one port, one `outcomes serve`).

Read-only: the only forms are sign-in and sign-out (POST, and the session cookie is
SameSite=Strict, so another site cannot submit them with it). Both are refused (403) when
another site's page sent them: `Sec-Fetch-Site` other than same-origin, or without it an
`Origin` that is neither this server's nor one in OUTCOMES_ALLOWED_ORIGINS (a request with
neither header, from a program, passes). Otherwise a page could sign a browser in with a
token of its choosing (login CSRF). Every page is a GET that reads through `ledger.services`,
scoped to the viewer's account."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any, ParamSpec, TypeVar
from urllib.parse import parse_qs

import orjson
from fastapi import APIRouter, FastAPI
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.staticfiles import StaticFiles

from console import approvals
from console.chart import chart
from console.errors import (
    BadRequest,
    ConsoleError,
    LedgerUnavailable,
    SignInRequired,
)
from console.filters import PAGE_SIZE, read_query
from console.guards import guarded, refuse_cross_site
from console.render import SECURITY_HEADERS, fragment, page
from console.sessions import COOKIE, PATH, Sessions
from console.timeline import steps
from console.viewer import ConsoleState, Viewer, state_of, viewer_of
from ledger.access import DETAIL_ROLES
from ledger.clock import now
from ledger.codes import REQUEST_CODES, Code, Status
from ledger.dispatch import Dispatcher
from ledger.errors import (
    NotAuthenticatedError,
    StorageError,
)
from ledger.job_view import JobView, envelope
from ledger.public import public_event
from ledger.queries import EventFilter, JobFilter
from ledger.runtime.ledger import Ledger
from ledger.runtime.outbox import Outbox
from ledger.services import audit, brakes, jobs, silence, tokens, verifications
from ledger.services.approvals import APPROVAL_ROLES
from ledger.settings import Settings

router = APIRouter(prefix=PATH, include_in_schema=False)
P = ParamSpec("P")
R = TypeVar("R")
SIGN_IN_BODY_BYTES = 4096  # a token is ~46 characters; nothing larger is read
SIGN_IN_FIELDS = ("token",)  # what the sign-in form sends: anything more is not our form
NEVER_DISPATCHED = "never dispatched (refused)"
WINDOWS = {
    "24h": (timedelta(hours=24), 24),
    "7d": (timedelta(days=7), 28),
    "30d": (timedelta(days=30), 30),
}
EXPORT_PAGE = 2000
BRAKE_COMMANDS = (
    'outcomes brake pull --scope tool:NAME --reason "…"',
    'outcomes brake release BRAKE_ID --reason "…"',
)


def mount(
    app: FastAPI, ledger: Ledger, settings: Settings, dispatcher: Dispatcher | Outbox | None = None
) -> None:
    """Serve the console from `app` over `ledger`; `dispatcher` publishes what an approver
    approves here (the API's outbox)."""
    app.state.console = ConsoleState(
        ledger,
        Sessions(),
        cookie_secure=settings.cookie_secure,
        allowed_origins=settings.allowed_origins,
        dispatcher=dispatcher,
    )
    app.include_router(router)
    app.include_router(approvals.router)
    app.mount(
        f"{PATH}/static", StaticFiles(packages=[("console", "static")]), name="console-static"
    )
    app.add_exception_handler(ConsoleError, _on_console_error)


async def _on_console_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ConsoleError)
    if isinstance(exc, SignInRequired):
        return RedirectResponse(f"{PATH}/sign-in", status_code=303, headers=SECURITY_HEADERS)
    return page("error.html", exc.status, title=exc.title, message=exc.message, viewer=None)


# --- signing in and out --------------------------------------------------------------------


@router.get("")
async def home() -> RedirectResponse:
    return RedirectResponse(f"{PATH}/jobs", status_code=303, headers=SECURITY_HEADERS)


@router.get("/sign-in")
def sign_in_page(request: Request) -> Response:
    if state_of(request).sessions.get(request.cookies.get(COOKIE)) is not None:
        return RedirectResponse(f"{PATH}/jobs", status_code=303, headers=SECURITY_HEADERS)
    return page("sign_in.html", viewer=None, message=None)


@router.post("/sign-in")
async def sign_in(request: Request) -> Response:
    refuse_cross_site(request)
    token = await _posted_token(request)
    state = state_of(request)
    try:
        found = await run_in_threadpool(tokens.authenticate, state.ledger, token)
    except NotAuthenticatedError:
        message = "That token is not valid: unknown or revoked."
        return page("sign_in.html", 401, viewer=None, message=message)
    except StorageError:
        raise LedgerUnavailable("The ledger did not answer; try again in a moment.") from None
    if found.role not in (*DETAIL_ROLES, *APPROVAL_ROLES):
        return page("refused.html", 403, viewer=None)
    # An approver's console is the approvals page (docs/approvals.md).
    first = "approvals" if found.role not in DETAIL_ROLES else "jobs"
    answer = RedirectResponse(f"{PATH}/{first}", status_code=303, headers=SECURITY_HEADERS)
    # A new id each time; the browser's old session and the token's others end here.
    sid = state.sessions.open(found, replacing=request.cookies.get(COOKIE))
    answer.set_cookie(
        COOKIE, sid, path=PATH, httponly=True, samesite="strict", secure=_secure(request)
    )
    return answer


@router.post("/sign-out")
def sign_out(request: Request) -> Response:
    refuse_cross_site(request)
    state_of(request).sessions.close(request.cookies.get(COOKIE))
    answer = RedirectResponse(f"{PATH}/sign-in", status_code=303, headers=SECURITY_HEADERS)
    answer.delete_cookie(
        COOKIE, path=PATH, httponly=True, samesite="strict", secure=_secure(request)
    )
    return answer


def _secure(request: Request) -> bool:
    """`Secure` when set so (behind a proxy that terminates TLS) or when the request came over
    HTTPS (as uvicorn sees it: X-Forwarded-Proto counts only from OUTCOMES_FORWARDED_ALLOW_IPS)."""
    return state_of(request).cookie_secure or request.url.scheme == "https"


async def _posted_token(request: Request) -> str:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > SIGN_IN_BODY_BYTES:
            raise BadRequest("The sign-in form sends one token, nothing larger.")
    try:
        fields = parse_qs(
            body.decode("utf-8", "replace"),
            keep_blank_values=True,
            max_num_fields=len(SIGN_IN_FIELDS),
        )
    except ValueError:  # more fields than the form has
        raise BadRequest("The sign-in form sends one field, the token.") from None
    if set(fields) - set(SIGN_IN_FIELDS) or any(len(v) > 1 for v in fields.values()):
        raise BadRequest("The sign-in form sends one field, the token.")
    return (fields.get("token") or [""])[0].strip()


# --- jobs ----------------------------------------------------------------------------------


@router.get("/jobs")
@guarded
def jobs_page(request: Request) -> Response:
    viewer = viewer_of(request)
    return page("jobs.html", viewer=viewer, nav="jobs", **_jobs_context(request, viewer))


@router.get("/jobs/rows")
@guarded
def jobs_rows(request: Request) -> Response:
    """The live part of the jobs page, for its script (a page without JS just reloads)."""
    viewer = viewer_of(request)
    context = _jobs_context(request, viewer)
    body = {
        "rows": fragment("_job_rows.html", **context),
        "counts": fragment("_counts.html", **context),
        "updated": now().strftime("%H:%M:%S UTC"),
    }
    return JSONResponse(body, headers=SECURITY_HEADERS)


def _jobs_context(request: Request, viewer: Viewer) -> dict[str, Any]:
    query = read_query(request.query_params)
    ledger = state_of(request).ledger
    found = jobs.search(ledger, query.to_filter(viewer.scope))
    account = viewer.scope or query.account
    by_status = audit.status_counts(ledger, account, query.tool, query.since, query.until)
    shown = found[:PAGE_SIZE]
    older = query.query_string(before=shown[-1].ledger_position) if len(found) > PAGE_SIZE else None
    return {
        "query": query,
        "rows": [_row(view) for view in shown],
        "older": older,
        "counts": {"jobs": sum(by_status.values()), "by_status": by_status},
        "statuses": [s.value for s in Status],
        "codes": [c.value for c in Code if c not in REQUEST_CODES],  # no job ends with those
    }


def _row(view: JobView) -> dict[str, Any]:
    """What the list shows of a job: the envelope's fields (never its arguments)."""
    return {
        "job_id": view.job_id,
        "account": view.account,
        "tool": view.tool,
        "status": view.status.value,
        "code": view.code.value if view.code else None,
        "cause": view.error.cause if view.error and view.code is Code.OUTCOME_MISSING else None,
        "attempts": view.attempts,
        "next_action": view.next_action.value,
        "created_at": view.created_at,
        "updated_at": view.updated_at,
    }


@router.get("/jobs/{job_id}")
@guarded
def job_page(request: Request, job_id: str) -> Response:
    viewer = viewer_of(request)
    view, entries = jobs.timeline(state_of(request).ledger, job_id, viewer.token)
    # A refused job was never dispatched: its view's attempt limit, timeout and dispatch
    # count are the read model's defaults, not facts of this job (None shows as "—").
    # Labels in sentence case, as the rest of the page's (the `shown` filter says a yes/no).
    staff: dict[str, object] = {
        "Ledger position": view.ledger_position,
        "Spends": view.spends,
        "Max attempts": view.max_attempts if view.accepted else None,
        "Timeout (s)": view.timeout_s if view.accepted else None,
        "Dispatches": view.dispatches if view.accepted else NEVER_DISPATCHED,
        "Last fingerprint": view.last_fingerprint,
        "Turn": view.turn,  # its page: /console/turns/<account>/<turn>
    }
    if not view.terminal:  # a closed job's last lease and retry time no longer mean anything
        staff |= {"Lease expires": view.lease_expires_at, "Retry due": view.due_at}
    return page(
        "job.html",
        viewer=viewer,
        nav="jobs",
        job=_row(view),
        envelope=envelope(view).model_dump(mode="json"),
        staff=staff,
        steps=steps(entries),
    )


# --- silence, brakes, audit ----------------------------------------------------------------


@router.get("/silence")
@guarded
def silence_page(request: Request) -> Response:
    viewer = viewer_of(request)
    window = request.query_params.get("window", "24h")
    if window not in WINDOWS:
        raise BadRequest("The window is one of 24h, 7d and 30d.")
    span, buckets = WINDOWS[window]
    ledger = state_of(request).ledger
    report = silence.silence(ledger, viewer.scope, now(), span, buckets)
    where = JobFilter(
        account=viewer.scope,
        limit=PAGE_SIZE,
        newest_first=True,
        status=Status.FAILED.value,
        code=Code.OUTCOME_MISSING.value,
        spends=True,
    )
    return page(
        "silence.html",
        viewer=viewer,
        nav="silence",
        window=window,
        windows=list(WINDOWS),
        report=report,
        chart=chart(report),
        verify=[_row(view) for view in jobs.search(ledger, where)],
    )


@router.get("/brakes")
@guarded
def brakes_page(request: Request) -> Response:
    viewer = viewer_of(request)
    found = brakes.history(state_of(request).ledger, viewer.scope, limit=100)
    return page(
        "brakes.html",
        viewer=viewer,
        nav="brakes",
        active=[r for r in found if r.brake.active],
        past=[r for r in found if not r.brake.active],
        commands=BRAKE_COMMANDS,
    )


@router.get("/audit")
@guarded
def audit_page(request: Request) -> Response:
    viewer = viewer_of(request)
    state = state_of(request)
    # Staff of one account see their account's newest change, and of the last verification
    # its verdict alone: the ledger's head, its counts and its problems are every account's.
    scope = viewer.scope
    head = audit.head(state.ledger) if scope is None else audit.account_head(state.ledger, scope)
    # The last recorded `outcomes audit verify` (one index read): the API never verifies.
    return page(
        "audit.html",
        viewer=viewer,
        nav="audit",
        scope=scope,
        head=head,
        last=verifications.last(state.ledger),
    )


@router.get("/audit/export.jsonl")
@guarded
def audit_export(request: Request) -> Response:
    """The events the viewer may read, as JSON Lines: the staff view (argument values
    withheld, hashes for auditors), never the raw rows: `outcomes audit export` is that."""
    viewer = viewer_of(request)
    ledger = state_of(request).ledger
    headers = SECURITY_HEADERS | {
        "Content-Disposition": 'attachment; filename="outcomes-events.jsonl"'
    }
    return StreamingResponse(
        _export_lines(ledger, viewer), media_type="application/x-ndjson", headers=headers
    )


def _export_lines(ledger: Ledger, viewer: Viewer) -> Iterator[bytes]:
    after = 0
    while found := audit.events(
        ledger, EventFilter(account=viewer.scope, after=after, limit=EXPORT_PAGE)
    ):
        yield b"".join(
            orjson.dumps(public_event(event, hashes=viewer.auditor)) + b"\n" for event in found
        )
        after = found[-1].position

"""The console's approvals page (docs/approvals.md): the calls parked for a person's approval,
oldest first, each with its reason, arguments (declared secrets shown as `(secret)`) and expiry,
and two buttons, Approve and Deny, with the reason the decision records. And a turn's page
(`/console/turns/<account>/<turn>`, docs/turns.md), for operators and auditors.

The console's only forms besides sign-in and sign-out, under the same rules: the session cookie
is SameSite=Strict, and a form another site's page sent (`Sec-Fetch-Site` cross-site, or an
`Origin` that is not this server's nor allowed) is refused (403) before anything is read. Only
approver and operator tokens see the page and decide; the decision is the API's
(`ledger.services.approvals.decide`): an event naming the signed-in token."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, quote

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from console.errors import BadRequest, NotForRole, PageNotFound
from console.guards import guarded, refuse_cross_site
from console.render import SECURITY_HEADERS, page
from console.sessions import PATH
from console.viewer import Viewer, state_of, viewer_of
from ledger.errors import (
    InvalidEventError,
    JobNotFoundError,
    NotDecidableError,
    SelfApprovalError,
    TurnNotFoundError,
)
from ledger.events import job_stream
from ledger.public import public_event_data
from ledger.runtime.ledger import Ledger
from ledger.services import approvals, turns
from ledger.services.approvals import APPROVAL_ROLES, MAX_REASON_CHARS, Approver

router = APIRouter(prefix=PATH, include_in_schema=False)
FORM_BYTES = 8192  # a decision and a reason of at most MAX_REASON_CHARS (encoded)
FORM_FIELDS = ("decision", "reason")
DECISIONS = {"approve": "approved", "deny": "denied"}


def approver_of(request: Request) -> Viewer:
    return viewer_of(request, APPROVAL_ROLES)


@router.get("/approvals")
@guarded
def approvals_page(request: Request) -> Response:
    viewer = approver_of(request)
    ledger = state_of(request).ledger
    found = approvals.pending(ledger, viewer.account)
    done = request.query_params.get("done")
    return page(
        "approvals.html",
        viewer=viewer,
        nav="approvals",
        rows=[_row(ledger, view) for view in found],
        done=done if done in ("approved", "denied") else None,
        job=request.query_params.get("job"),
        max_reason=MAX_REASON_CHARS,
    )


def _row(ledger: Ledger, view: Any) -> dict[str, Any]:
    with ledger.store.reading() as reads:
        decision = reads.read_stream(job_stream(view.job_id))[0]
    args = public_event_data(decision.data).get("args", {})
    return {
        "job_id": view.job_id,
        "account": view.account,
        "tool": view.tool,
        "spends": view.spends,
        "reason": view.approval.reason,
        "requested_at": view.approval.requested_at,
        "expires_at": view.approval.expires_at,
        "args": args,
    }


@router.post("/approvals/{job_id}")
async def decide(request: Request, job_id: str) -> Response:
    refuse_cross_site(request)  # before anything is read: another site's form does nothing
    fields = await _posted(request)
    decision = DECISIONS.get(fields.get("decision", ""))
    if decision is None:
        raise BadRequest("The form says approve or deny.")
    viewer = await run_in_threadpool(approver_of, request)
    state = state_of(request)
    by = Approver.of_token(viewer.token)
    try:
        await run_in_threadpool(
            approvals.decide,
            state.ledger,
            job_id,
            by,
            decision,  # type: ignore[arg-type]
            fields.get("reason"),
            state.dispatcher,
        )
    except InvalidEventError:
        raise BadRequest("A decision needs a reason (at most 500 characters).") from None
    except JobNotFoundError:
        raise BadRequest("No such call awaits approval for this token.") from None
    except SelfApprovalError:
        raise NotForRole("The token that submitted a call cannot decide it.") from None
    except NotDecidableError as exc:
        raise BadRequest(f"That call is not awaiting approval any more ({exc.cause}).") from None
    target = f"{PATH}/approvals?done={decision}&job={quote(job_id)}"
    return RedirectResponse(target, status_code=303, headers=SECURITY_HEADERS)


async def _posted(request: Request) -> dict[str, str]:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > FORM_BYTES:
            raise BadRequest("The decision form sends a decision and a short reason.")
    try:
        fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True, max_num_fields=2)
    except ValueError:
        raise BadRequest("The decision form sends a decision and a reason.") from None
    if set(fields) - set(FORM_FIELDS) or any(len(v) > 1 for v in fields.values()):
        raise BadRequest("The decision form sends a decision and a reason.")
    return {key: values[0] for key, values in fields.items()}


# --- a turn (docs/turns.md) ------------------------------------------------------------------


@router.get("/turns/{account}/{turn_id}")
@guarded
def turn_page(request: Request, account: str, turn_id: str) -> Response:
    viewer = viewer_of(request)  # operators and auditors
    if viewer.scope not in (None, account):
        raise PageNotFound("No such turn (or not one of your account's).")
    try:
        found = turns.report(state_of(request).ledger, account, turn_id)
    except (TurnNotFoundError, InvalidEventError):
        raise PageNotFound("No such turn (or not one of your account's).") from None
    return page("turn.html", viewer=viewer, nav="jobs", account=account, turn=found)

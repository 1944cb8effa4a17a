"""`outcomes approvals …`: the calls parked for a person's approval, and the decision, at the
database as an operator of every account (docs/approvals.md)."""

from __future__ import annotations

import click

from cli.brake_commands import operator_option
from cli.context import with_ledger
from cli.errors import fail, reports_errors
from cli.output import emit_json, json_option
from ledger.approvals import refusal
from ledger.dispatch import Dispatcher
from ledger.errors import DispatchError, NotDecidableError
from ledger.job_view import envelope
from ledger.runtime.ledger import Ledger
from ledger.services import approvals as approval_service
from ledger.services.approvals import MAX_PENDING, MAX_REASON_CHARS, Approver, Decision
from ledger.services.jobs import job_key


@click.group()
def approvals() -> None:
    """Calls waiting for a person's approval: list them, approve or deny one."""


@approvals.command("list")
@click.option("--account", help="Only this account's calls.")
@click.option("--tool", help="Only this tool's calls.")
@click.option("--limit", type=click.IntRange(1, MAX_PENDING), default=100, show_default=True)
@json_option
@reports_errors
@with_ledger
def list_command(
    ledger: Ledger, account: str | None, tool: str | None, limit: int, as_json: bool
) -> None:
    """The calls awaiting approval, oldest first (with --json, {items, count})."""
    found = approval_service.pending(ledger, "*", account=account, tool=tool, limit=limit)
    items = [envelope(view).model_dump(mode="json") for view in found]
    if as_json:
        emit_json({"items": items, "count": len(items)})
        return
    if not found:
        click.echo("no calls await approval")
    for view in found:
        assert view.approval is not None
        click.echo(
            f"{view.job_id}  {view.account}  {view.tool}"
            f"  since {view.approval.requested_at:%Y-%m-%d %H:%M:%S}"
            f"  expires {view.approval.expires_at:%Y-%m-%d %H:%M:%S}  {view.approval.reason}"
        )


def _decide(
    ledger: Ledger, job_id: str, decision: Decision, reason: str, operator: str, as_json: bool
) -> None:
    if job_key(job_id) is None:
        fail(f"{job_id!r} is not a job id (a UUID)")
    by = Approver("*", "operator", operator)
    dispatcher = _dispatcher() if decision == "approved" else None
    try:
        view = approval_service.decide(ledger, job_id, by, decision, reason, dispatcher)
    except NotDecidableError as exc:
        if as_json:
            error = approval_service_refusal(exc.cause, exc.job_id)
            emit_json({"error": error, "job": exc.envelope})
        fail(f"NOT_DECIDABLE: {exc}")
        return
    finally:
        close = getattr(dispatcher, "close", None)
        if close is not None:
            close()
    if as_json:
        emit_json(envelope(view).model_dump(mode="json"))
    else:
        click.echo(f"job {view.job_id} {decision}: now {view.status.value}")


def approval_service_refusal(cause: str, job_id: str) -> dict[str, object]:
    look = f"read the job (outcomes jobs show {job_id}): its approval holds the first decision"
    return refusal(cause, look).model_dump(mode="json")


def _dispatcher() -> Dispatcher | None:
    """The broker, to publish an approved call at once; none reachable: the reconciler's
    relay publishes it."""
    from workers.dispatch import dispatcher_from_settings

    try:
        return dispatcher_from_settings()
    except (DispatchError, OSError):
        return None


_REASON = f"Why (required, at most {MAX_REASON_CHARS} characters): recorded in the decision."


@approvals.command("approve")
@click.argument("job_id")
@click.option("--reason", required=True, help=_REASON)
@operator_option
@json_option
@reports_errors
@with_ledger
def approve_command(ledger: Ledger, job_id: str, reason: str, operator: str, as_json: bool) -> None:
    """Approve a parked call: it is queued and dispatched; the brake is re-checked when a
    worker starts it. A call not awaiting approval is left as it is: exit 1."""
    _decide(ledger, job_id, "approved", reason, operator, as_json)


@approvals.command("deny")
@click.argument("job_id")
@click.option("--reason", required=True, help=_REASON)
@operator_option
@json_option
@reports_errors
@with_ledger
def deny_command(ledger: Ledger, job_id: str, reason: str, operator: str, as_json: bool) -> None:
    """Deny a parked call: it ends refused (ACCESS_DENIED, approval_denied), nothing ran."""
    _decide(ledger, job_id, "denied", reason, operator, as_json)

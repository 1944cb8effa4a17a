"""`outcomes jobs …`: read jobs' envelopes straight from the ledger."""

from __future__ import annotations

import shlex
from datetime import datetime
from pathlib import Path

import click

from cli.archive_commands import show_archived
from cli.brake_commands import operator_option
from cli.context import ledger_of, with_ledger
from cli.errors import fail, reports_errors
from cli.output import emit_json, json_option
from cli.params import MOMENT, POSITION
from ledger.clock import format_time
from ledger.codes import Status
from ledger.errors import NotCancellableError
from ledger.job_view import JobView, envelope
from ledger.queries import JobFilter
from ledger.runtime.ledger import Ledger
from ledger.services import jobs as job_service
from ledger.services.cancel import MAX_REASON_CHARS, Canceller, cancel, refusal
from ledger.tools import TOOL_NAME


@click.group()
def jobs() -> None:
    """Inspect jobs: their status, outcome and the agent's next action."""


@jobs.command("show")
@click.argument("job_id")
@click.option(
    "--archive",
    "archive_dir",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="Find the job in the archives in DIR (no database): its row and its events.",
)
@json_option
@reports_errors
def show(job_id: str, archive_dir: Path | None, as_json: bool) -> None:
    """Show one job's envelope (exactly what `GET /v1/jobs/{id}` returns), or, with
    --archive, the archived job as its archive's files keep it."""
    key = job_service.job_key(job_id)
    if key is None:
        fail(f"{job_id!r} is not a job id (a UUID)")
    if archive_dir is not None:
        show_archived(archive_dir, str(key), as_json)
        return
    ledger = ledger_of(click.get_current_context())
    view = job_service.get(ledger, job_id)
    body = envelope(view, job_service.waiting_of(ledger, view)).model_dump(mode="json")
    if as_json:
        emit_json(body)
        return
    for key, value in body.items():
        if value not in (None, [], {}):
            click.echo(f"{key:>16}: {value}")
    if view.trace is not None:  # recorded with the decision (docs/tracing.md); not enveloped
        click.echo(f"{'trace_id':>16}: {view.trace.trace_id}")


@jobs.command("cancel")
@click.argument("job_id")
@click.option(
    "--reason",
    help=f"Why (at most {MAX_REASON_CHARS} characters): recorded, and quoted in the job's "
    "declined_reason.",
)
@operator_option
@json_option
@reports_errors
@with_ledger
def cancel_command(
    ledger: Ledger, job_id: str, reason: str | None, operator: str, as_json: bool
) -> None:
    """Cancel a job no worker has started (queued, or waiting for its retry): it ends declined,
    nothing runs, and its message is dropped when a worker gets it. A job already running or
    ended is left as it is: exit 1 (with --json, {error, job} on stdout: NOT_CANCELLABLE and
    its envelope). Cancelling a cancelled job again prints the same envelope."""
    if job_service.job_key(job_id) is None:
        fail(f"{job_id!r} is not a job id (a UUID)")
    try:
        view = cancel(ledger, job_id, Canceller.operator(operator), reason)
    except NotCancellableError as exc:
        if as_json:
            show = f"outcomes jobs show {exc.job_id}"
            error = refusal(exc.status, f"wait for its outcome ({show})", show)
            emit_json({"error": error.model_dump(mode="json"), "job": exc.envelope})
        fail(f"NOT_CANCELLABLE: {exc}")
        return
    if as_json:
        emit_json(envelope(view).model_dump(mode="json"))
    else:
        click.echo(f"job {view.job_id} {view.status.value}: {view.declined_reason}")


def _tool_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not TOOL_NAME.fullmatch(value):
        raise click.BadParameter(
            f"{value!r} is not a tool name (lower-case words joined by dots, e.g. "
            "tracker.read_issue; `outcomes tools list` names the loaded ones)"
        )
    return value


@jobs.command("list")
@click.option("--account", help="Only this account's jobs.")
@click.option(
    "--status",
    type=click.Choice([s.value for s in Status]),
    help="Only jobs in this status.",
)
@click.option(
    "--tool", callback=_tool_name, help="Only this tool's jobs (e.g. tracker.read_issue)."
)
@click.option(
    "--since",
    type=MOMENT,
    metavar="WHEN",
    help="Only jobs created at or after WHEN: ISO 8601 (UTC unless it says otherwise) or a "
    "time ago (90s, 15m, 2h, 7d).",
)
@click.option(
    "--before",
    type=POSITION,
    help="Only jobs whose last change is before this ledger position: for the next page "
    "(newest first), pass the previous page's next_cursor here.",
)
@click.option(
    "--after",
    type=POSITION,
    default=0,
    help="Only jobs changed after this ledger position: for the next page with "
    "--oldest-first, pass the previous page's next_cursor here.",
)
@click.option("--oldest-first", is_flag=True, help="Oldest change first (default: newest first).")
@click.option("--limit", type=click.IntRange(1, 10000), default=50, show_default=True)
@json_option
@reports_errors
@with_ledger
def list_command(
    ledger: Ledger,
    account: str | None,
    status: str | None,
    tool: str | None,
    since: datetime | None,
    before: int | None,
    after: int,
    oldest_first: bool,
    limit: int,
    as_json: bool,
) -> None:
    """List jobs by their last change (a ledger position), newest first; --status, --tool,
    --since and --account narrow it (all of them at once).

    --json prints {items, count, truncated, next_cursor, next_option}: while truncated is
    true, run again with the same filters and NEXT_OPTION NEXT_CURSOR (--before when newest
    first, --after with --oldest-first) to read the next page.
    """
    # One more than asked tells whether the page was cut short.
    where = JobFilter(
        account=account,
        after=after,
        limit=limit + 1,
        before=before,
        newest_first=not oldest_first,
        status=status,
        tool=tool,
        since=since,
    )
    views = job_service.search(ledger, where)
    truncated = len(views) > limit
    views = views[:limit]
    following = "--after" if oldest_first else "--before"
    start = after if oldest_first else before
    cursor = views[-1].ledger_position if views else start
    if as_json:
        items = [envelope(v).model_dump(mode="json") for v in views]
        body = {"items": items, "next_cursor": cursor, "count": len(items)}
        emit_json(body | {"truncated": truncated, "next_option": following})
        return
    click.echo(_row("JOB", "ACCOUNT", "TOOL", "STATUS", "CODE", "NEXT ACTION"))
    for v in views:
        click.echo(_line(v))
    if truncated:
        kept = [("--account", account), ("--status", status), ("--tool", tool)]
        kept.append(("--since", format_time(since) if since else None))
        again = [f"{name} {shlex.quote(value)}" for name, value in kept if value is not None]
        again += ["--oldest-first"] if oldest_first else []
        again.append(f"{following} {cursor}")
        click.echo(f"next page: outcomes jobs list {' '.join(again)}", err=True)


def _row(*cells: str) -> str:
    widths = (36, 12, 26, 10, 22, 22)
    return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()


def _line(v: JobView) -> str:
    code = v.code.value if v.code else "-"
    return _row(v.job_id, v.account, v.tool, v.status.value, code, v.next_action.value)

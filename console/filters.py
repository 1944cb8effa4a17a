"""The jobs list's filters, read from the query string (never through FastAPI's validation: a
mistake here is a sentence on the page, not a problem+json). Each value is checked against the
set or pattern it belongs to, so nothing unchecked reaches a query or a link."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from urllib.parse import urlencode

from starlette.datastructures import QueryParams

from console.errors import BadRequest
from ledger.access import ACCOUNT_PATTERN
from ledger.codes import Code, Status
from ledger.queries import MAX_POSITION, JobFilter

PAGE_SIZE = 50
TOOL = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")
ACCOUNT = re.compile(ACCOUNT_PATTERN)
# What <input type="datetime-local"> sends (seconds optional), read as UTC.
LOCAL_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?$")


@dataclass(frozen=True)
class JobQuery:
    status: str | None = None
    code: str | None = None
    tool: str | None = None
    account: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    before: int | None = None  # the page: jobs whose ledger_position is below it

    @property
    def filtered(self) -> bool:
        return any((self.status, self.code, self.tool, self.account, self.since, self.until))

    def to_filter(self, scope: str | None, limit: int = PAGE_SIZE + 1) -> JobFilter:
        """The store's filter; `scope` is the viewer's account (None: every account), which
        an account-scoped viewer's own filter can narrow to itself and no further."""
        return JobFilter(
            account=scope if scope is not None else self.account,
            limit=limit,
            before=self.before,
            newest_first=True,
            status=self.status,
            code=self.code,
            tool=self.tool,
            since=self.since,
            until=self.until,
        )

    def query_string(self, **change: object) -> str:
        """This query as a link's query string, with `change` applied (None drops a key)."""
        changed = replace(self, **change)  # type: ignore[arg-type]
        pairs = {
            "status": changed.status,
            "code": changed.code,
            "tool": changed.tool,
            "account": changed.account,
            "since": _local(changed.since),
            "until": _local(changed.until),
            "before": str(changed.before) if changed.before is not None else None,
        }
        return urlencode({k: v for k, v in pairs.items() if v})

    def form_value(self, name: str) -> str:
        value = getattr(self, name)
        return _local(value) or "" if isinstance(value, datetime) else (value or "")


def read_query(params: QueryParams) -> JobQuery:
    def text(name: str) -> str | None:
        value = params.get(name, "").strip()
        return value or None

    status, code, tool, account = text("status"), text("code"), text("tool"), text("account")
    if status is not None and status not in {s.value for s in Status}:
        raise BadRequest("Status must be one of the job statuses offered in the list.")
    if code is not None and code not in {c.value for c in Code}:
        raise BadRequest("Code must be one of the failure codes offered in the list.")
    if tool is not None and not TOOL.match(tool):
        raise BadRequest("A tool name holds letters, digits and . _ : - only.")
    if account is not None and not ACCOUNT.match(account):
        raise BadRequest("An account holds lowercase letters, digits, _ and - only.")
    return JobQuery(
        status=status,
        code=code,
        tool=tool,
        account=account,
        since=_time(text("since")),
        until=_time(text("until")),
        before=_position(text("before")),
    )


def _time(text: str | None) -> datetime | None:
    if text is None:
        return None
    if not LOCAL_TIME.match(text):
        raise BadRequest("Times are read as UTC, written like 2026-01-31T12:00.")
    try:
        return datetime.fromisoformat(text).replace(tzinfo=UTC)
    except ValueError:
        raise BadRequest("A time is not a calendar time.") from None


def _position(text: str | None) -> int | None:
    if text is None:
        return None
    if not text.isdigit() or not 0 < int(text) <= MAX_POSITION:
        raise BadRequest("The page link is not one this console made.")
    return int(text)


def _local(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M") if moment else None

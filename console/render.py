"""Pages from the templates in `console/templates` (Jinja2, autoescaped: every value is text,
never markup), with the headers every console answer carries: no caching, no framing, no
referrer to another site, and a content security policy that admits only this server's own CSS
and JS."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from starlette.responses import HTMLResponse

from console.chart import colour

SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    # Not no-referrer: under it a browser sends `Origin: null` with the console's own forms,
    # which the sign-in's cross-site check could not tell from another site's page.
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}


def _when(moment: datetime | str | None) -> str:
    if moment is None:
        return "—"
    if isinstance(moment, str):
        return moment
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _short(value: str | None, keep: int = 12) -> str:
    return "—" if not value else (value if len(value) <= keep else value[:keep] + "…")


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


def _shown(value: Any) -> str:
    """A value as a person reads it in a label's place: a yes or a no for a flag (never
    Python's `False`), a moment in UTC, a dash for nothing."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return _when(value)
    return str(value)


def _scalar(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


ENV = Environment(
    loader=PackageLoader("console", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    undefined=StrictUndefined,  # a misspelt name fails the page, it never renders as ""
    trim_blocks=True,
    lstrip_blocks=True,
)
ENV.filters.update(
    when=_when, short=_short, pretty=_pretty, scalar=_scalar, shown=_shown, colour=colour
)


def page(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    html = ENV.get_template(template).render(**context)
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


def fragment(template: str, **context: Any) -> str:
    return ENV.get_template(template).render(**context)

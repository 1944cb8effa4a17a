"""What a console request can fail with, each answered by an HTML page (never problem+json: a
person reads it), by `console.web`'s handler."""

from __future__ import annotations


class ConsoleError(Exception):
    """An answer other than the page asked for: its HTTP status and one sentence for people."""

    status = 400
    title = "Cannot show this"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class SignInRequired(ConsoleError):
    """No session, an expired one, or its token was revoked since: back to the sign-in page."""

    status = 303
    title = "Sign in"


class BadRequest(ConsoleError):
    """A filter or form that cannot be read (nothing a caller sent is echoed back)."""

    status = 400
    title = "Cannot read this request"


class CrossSiteForm(ConsoleError):
    """A form posted from another site's page (login CSRF): nothing it asks is done."""

    status = 403
    title = "Sent from another site"


class PageNotFound(ConsoleError):
    """No such job for this viewer (unknown and other accounts' jobs look the same)."""

    status = 404
    title = "Not found"


class LedgerUnavailable(ConsoleError):
    """The ledger did not answer; the page can be reloaded."""

    status = 503
    title = "The ledger is not answering"


class NotForRole(ConsoleError):
    """A page this viewer's role does not open (an approver on the staff pages, an auditor on
    the approvals page)."""

    status = 403
    title = "Not for this token"

"""The client's exceptions, one tree (it imports nothing from the server's `ledger`).

    OutcomesError
    ├── ProblemError            the API answered a problem+json: .problem, .code, .fix, .next_action
    │   ├── AuthenticationError     401: no valid token
    │   ├── PermissionDenied        403: role, account or tool not allowed
    │   ├── NotFound                404: unknown job (or another account's)
    │   ├── NotCancellable          409 NOT_CANCELLABLE: the job started or ended (.envelope)
    │   ├── InvalidRequest          other 4xx: the request itself is wrong (422, 413, 415, ...)
    │   └── ServiceUnavailable      5xx: the API or its ledger is down; try again later
    ├── UnexpectedResponse      an answer that is not the contract's (a proxy's HTML page, ...)
    ├── TransportError          the API could not be reached, or did not answer in time
    └── WaitTimeout             the deadline passed before the job ended (.envelope: last seen)

A refused job is not here: it is a recorded decision, answered as a `Submission` or an
`Envelope` with status `refused` (contract §3).
"""

from __future__ import annotations

from outcomes_client.models import CancelRefusal, Envelope, NextAction, Problem


class OutcomesError(Exception):
    """Anything the client raises on purpose."""


class ProblemError(OutcomesError):
    def __init__(self, problem: Problem) -> None:
        super().__init__(f"{problem.status} {problem.error.code}: {problem.detail}")
        self.problem = problem
        self.status = problem.status
        self.code = problem.error.code
        self.fix = problem.error.fix
        self.job_id = problem.job_id

    @property
    def next_action(self) -> NextAction:
        """The agent's move: fix the request (4xx), wait and retry (503, or a retryable
        error), or stop and report (any other server failure)."""
        if self.status == 503 or self.problem.error.retryable:
            return "wait"
        if self.status >= 500:
            return "stop_and_report"
        return "satisfy_precondition"


class AuthenticationError(ProblemError):
    pass


class PermissionDenied(ProblemError):
    pass


class NotFound(ProblemError):
    pass


class NotCancellable(ProblemError):
    """A cancel of a job a worker has started (or that has ended): nothing was changed. Wait
    for its outcome instead; `envelope` is the job as the cancel found it."""

    def __init__(self, problem: CancelRefusal) -> None:
        super().__init__(problem)
        self.envelope = problem.job

    @property
    def next_action(self) -> NextAction:
        return "accept" if self.envelope.terminal else "wait"


class InvalidRequest(ProblemError):
    pass


class ServiceUnavailable(ProblemError):
    pass


class UnexpectedResponse(OutcomesError):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"unexpected answer {status}: {body[:200]}")
        self.status = status
        self.body = body


class TransportError(OutcomesError):
    """The request did not complete (connection refused or dropped, timeout)."""


class WaitTimeout(OutcomesError):
    def __init__(self, job_id: str, envelope: Envelope | None) -> None:
        status = envelope.status if envelope else "unknown"
        super().__init__(f"job {job_id} still {status} at the deadline")
        self.job_id = job_id
        self.envelope = envelope


def problem_error(problem: Problem) -> ProblemError:
    """The typed exception for a problem, by HTTP status (a refused cancel by its code)."""
    kind: type[ProblemError]
    if isinstance(problem, CancelRefusal):
        return NotCancellable(problem)
    if problem.status == 401:
        kind = AuthenticationError
    elif problem.status == 403:
        kind = PermissionDenied
    elif problem.status == 404:
        kind = NotFound
    elif problem.status >= 500:
        kind = ServiceUnavailable
    else:
        kind = InvalidRequest
    return kind(problem)

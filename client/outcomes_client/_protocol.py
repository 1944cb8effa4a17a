"""What the sync and async clients share: request documents and reading answers (no I/O)."""

from __future__ import annotations

from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, SecretBytes, SecretStr, ValidationError

from outcomes_client.errors import (
    OutcomesError,
    TransportError,
    UnexpectedResponse,
    problem_error,
)
from outcomes_client.models import CancelRefusal, Change, JobPage, Problem, Submission

M = TypeVar("M", bound=BaseModel)

MAX_SERVER_WAIT_S = 60.0  # the API's long-poll bound (contract §6)
# A long-poll's HTTP timeout is its `wait` plus this: a reply a little late is not a failure.
ANSWER_MARGIN_S = 10.0
# Worth trying again: the request did not complete, or the API said it is down for now.
RETRY_BACKOFF_S = (0.1, 0.25, 0.5, 1.0, 2.0)


def submit_document(
    tool: str,
    args: dict[str, Any],
    idempotency_key: str | None,
    start_within_s: float | None = None,
    budget_bytes: int | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"tool": tool, "args": revealed(args)}
    if idempotency_key is not None:
        body["idempotency_key"] = idempotency_key
    if start_within_s is not None:
        body["start_within_s"] = start_within_s
    if budget_bytes is not None:
        body["budget_bytes"] = budget_bytes
    return body


def turn_headers(turn: str | None, halt_on_failure: bool) -> dict[str, str]:
    """`Outcomes-Turn` (and `Outcomes-Turn-Halt: on-failure`) for a call of a turn."""
    if turn is None:
        if halt_on_failure:
            raise ValueError("halt_on_failure needs the turn it halts")
        return {}
    headers = {"Outcomes-Turn": turn}
    if halt_on_failure:
        headers["Outcomes-Turn-Halt"] = "on-failure"
    return headers


def revealed(value: Any) -> Any:
    """`args` as sent: a `SecretStr`/`SecretBytes` (so the agent's own code never prints a
    secret) becomes its value, which only the request body carries."""
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, SecretBytes):
        return value.get_secret_value().decode()
    if isinstance(value, dict):
        return {key: revealed(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [revealed(item) for item in value]
    return value


def read_submission(response: httpx.Response) -> Submission:
    """202: queued. A problem naming a recorded job: a refusal, which is a decision, returned.
    Any other problem (401, an unrecorded 422, ...) is raised."""
    if response.status_code == 202:
        return read(response, Submission)
    error = error_of(response)
    problem = getattr(error, "problem", None)
    if isinstance(problem, Problem) and problem.job_id is not None:
        return Submission(
            job_id=problem.job_id,
            status="refused",
            poll_url=f"/v1/jobs/{problem.job_id}",
            error=problem.error,
        )
    raise error


def read(response: httpx.Response, model: type[M]) -> M:
    if not response.is_success:
        raise error_of(response)
    try:
        return model.model_validate_json(response.content)
    except ValidationError:
        raise UnexpectedResponse(response.status_code, response.text) from None


NOT_CANCELLABLE = "NOT_CANCELLABLE"


def error_of(response: httpx.Response) -> OutcomesError:
    try:
        problem = Problem.model_validate_json(response.content)
        if problem.status == 409 and problem.error.code == NOT_CANCELLABLE:
            problem = CancelRefusal.model_validate_json(response.content)
        return problem_error(problem)
    except ValidationError:
        return UnexpectedResponse(response.status_code, response.text)


def cancel_document(reason: str | None) -> dict[str, Any] | None:
    return {"reason": reason} if reason is not None else None


def retryable(error: BaseException) -> bool:
    """A failure that waiting may cure: the network, a timeout, or a 503."""
    if isinstance(error, httpx.TransportError | TransportError):
        return True
    return isinstance(error, OutcomesError) and getattr(error, "status", None) == 503


def changes_of(page: JobPage, after: str | None) -> list[Change]:
    """Each job with a resume cursor that never skips (see `Change`)."""
    last = len(page.items) - 1
    return [
        Change(job=job, cursor=page.next_cursor if i == last else after)
        for i, job in enumerate(page.items)
    ]


def backoff(failures: int) -> float:
    return RETRY_BACKOFF_S[min(failures, len(RETRY_BACKOFF_S) - 1)]

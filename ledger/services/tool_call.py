"""One attempt at a job's tool, from its claimed view to the one event it becomes: the declared
secrets opened for the tool only, the arguments checked again by this release, the context the
tool is handed, the call (in a span of the job's trace when tracing is on) and what it did,
classified (`ledger.classify`). How the call is made, on which thread and under which
deadline, is the caller's (`execute.Executor.start`)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from ledger.budget import effective_budget
from ledger.classify import Attempt, Budget, failure_event, outcome_event
from ledger.codes import Code
from ledger.errors import SecretUnavailableError
from ledger.events import Payload, WorkFailed
from ledger.job_view import JobView
from ledger.keyring import Keyring
from ledger.runtime.tool_loop import not_awaitable
from ledger.scrub import known_secrets
from ledger.secrets import open_args
from ledger.services.not_run import args_rejected, secret_unavailable
from ledger.tools import ToolContext, ToolSpec
from ledger.tracing import job_attributes, tracer

ToolCall = Callable[[ToolSpec, BaseModel, ToolContext, JobView], Any]
Heartbeat = Callable[[str, int], None]  # (job id, attempt): renew that attempt's lease
Checkpoint = Callable[[JobView], None]  # raises BrakeEngaged when a brake holds the job


class Superseded(BaseException):  # not an error: a tool that returned too late
    """Raised past the tool (never into it) when its deadline already settled the job."""


def run(
    spec: ToolSpec,
    view: JobView,
    call: ToolCall,
    keys: Keyring | None,
    heartbeat: Heartbeat,
    checkpoint: Checkpoint,
) -> Payload:
    """The tool's run, in a span of the job's trace (the ambient one while the tool runs,
    so its own instrumentation nests under it) when tracing is on."""
    spans = tracer()
    if not spans.enabled or view.trace is None:
        return _attempted(spec, view, call, keys, heartbeat, checkpoint)
    attributes = job_attributes(view.job_id, view.tool, view.account)
    made = spans.start("outcomes.run", view.trace, attributes)
    made.set_attribute("outcomes.attempt", view.attempts)
    try:
        with spans.current(made):
            payload = _attempted(spec, view, call, keys, heartbeat, checkpoint)
        made.set_attribute("outcomes.outcome", payload.type)
        if payload.code is not None:
            made.fail(payload.code.value)
        return payload
    except Superseded:
        made.fail(Code.DEADLINE_EXCEEDED.value)
        raise
    finally:
        made.end()


def _attempted(
    spec: ToolSpec,
    view: JobView,
    call: ToolCall,
    keys: Keyring | None,
    heartbeat: Heartbeat,
    checkpoint: Checkpoint,
) -> Payload:
    attempt = view.attempts
    try:
        # The declared secrets are opened here, for the tool only: never recorded.
        paths = view.secret_paths or ()
        opened = open_args(spec.args_model, view.args, paths, view.job_id, keys)
    except SecretUnavailableError as exc:
        return WorkFailed(attempt=attempt, error=secret_unavailable(spec, exc))
    try:
        # Checked again here, not only at submit: a worker of another release may read the
        # arguments differently (a rolling deploy). Nothing runs then.
        args = spec.args_model.model_validate(opened.args)
    except ValidationError as exc:
        return WorkFailed(attempt=attempt, error=args_rejected(spec, exc))
    secrets = known_secrets(opened.secrets)
    budget = Budget(
        effective_budget(spec.max_result_bytes, view.budget_bytes), spec.max_result_bytes
    )
    ctx = ToolContext(
        job_id=view.job_id,
        attempt=attempt,
        idempotency_key=view.idempotency_key or view.job_id,
        heartbeat=lambda: heartbeat(view.job_id, attempt),
        checkpoint=lambda: checkpoint(view),
        budget_bytes=budget.budget_bytes,
    )
    try:
        value = not_awaitable(call(spec, args, ctx, view))
    except Exception as exc:  # classify.py says what each one is (a brake: a halt)
        return failure_event(exc, attempt_of(spec, view, secrets))
    return outcome_event(value, attempt, secrets, budget)


def attempt_of(spec: ToolSpec, view: JobView, secrets: tuple[str, ...] = ()) -> Attempt:
    """`secrets`: the job's declared secrets, for a failure whose text the tool wrote (a
    deadline's text is the ledger's own)."""
    return Attempt(
        tool=spec.name,
        attempt=view.attempts,
        max_attempts=view.max_attempts,
        spends=view.spends,
        last_fingerprint=view.last_fingerprint,
        now=datetime.now(UTC),
        secrets=secrets,
    )
